"""Seeds: the demo, JSON and TOML files, seeded builds, and one-line errors for bad files."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from emulator_support import SMALL_SEED, Http

from asyncclient.testing import FakeService, SeedError, demo_seed, demo_seed_data, load_seed
from asyncclient.testing.pytest_plugin import FakeServiceFactory

TOML = """
[[projects]]
id = "p_toml"
name = "From TOML"
plan = "free"
includedRuns = 3

[[keys]]
key = "toml-key"
capability = "edit"
projects = ["p_toml"]

[[tests]]
id = "t_android"
project = "p_toml"
target = "android"
appId = "org.example.toml"
outcome = "blocked"
durationSeconds = 10
queuedSeconds = 1
captures = { screen = "login" }

[[tests.requirements]]
title = "Opens"
result = "skipped"
reason = "A captcha blocked the tester."

[[builds]]
id = "ab_toml"
project = "p_toml"
platform = "android"
appId = "org.example.toml"
versionCode = 12
abis = ["arm64-v8a"]

[[builds]]
id = "ab_device"
project = "p_toml"
platform = "ios"
appId = "org.example.toml.ios"
platforms = ["iPhoneOS"]
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_json_and_dict_seeds_are_the_same(tmp_path: Path) -> None:
    path = write(tmp_path, "seed.json", json.dumps(SMALL_SEED))
    from_file = load_seed(path)
    from_dict = load_seed(SMALL_SEED)
    assert from_file.source == str(path)
    assert from_file.projects == from_dict.projects
    assert from_file.tests == from_dict.tests
    assert [t.id for t in from_file.tests] == ["t_web", "t_app", "t_pinned", "t_fail", "t_hooks"]
    assert from_file.first_key("edit") == "k-edit"


def test_keys_are_not_in_reprs() -> None:
    seed = load_seed(SMALL_SEED)
    assert "k-run" not in repr(seed.keys)
    assert "s3cret" not in repr(seed.endpoints)


async def test_a_toml_seed_with_real_builds(
    tmp_path: Path,
    fake_service_factory: FakeServiceFactory,
    clients: Callable[..., Http],
) -> None:
    path = write(tmp_path, "seed.toml", TOML)
    service = await fake_service_factory(path, clock="manual")
    client = clients(service, "toml-key")
    assert (service.project_id, service.edit_key) == ("p_toml", "toml-key")
    builds = (await client.get("/api/v1/projects/p_toml/builds")).json["builds"]
    by_id = {b["id"]: b for b in builds}
    android = by_id["ab_toml"]
    assert (android["status"], android["appId"], android["versionCode"]) == (
        "ready",
        "org.example.toml",
        "12",
    )
    assert android["abis"] == ["arm64-v8a"]
    assert android["warnings"]
    assert by_id["ab_device"]["status"] == "rejected"
    started = await client.post("/api/v1/tests/t_android/run")
    assert started.status == 201
    service.advance(11)
    run = (await client.get(f"/api/v1/runs/{started.json['runId']}")).json["run"]
    assert (run["status"], run["buildId"]) == ("blocked", "ab_toml")
    assert run["requirements"][0]["reason"] == "A captcha blocked the tester."
    assert run["captures"] == {"screen": "login"}


def test_the_demo_seed() -> None:
    seed = demo_seed()
    assert [p.id for p in seed.projects] == ["p_demo", "p_free", "p_new"]
    assert {(k.key, k.capability) for k in seed.keys} == {
        ("demo-run", "run"),
        ("demo-edit", "edit"),
    }
    tests = {t.id: t for t in seed.tests}
    assert {t.id for t in seed.tests if t.project == "p_demo"} == {
        "t_login",
        "t_checkout",
        "t_search",
        "t_onboarding",
    }
    assert (tests["t_login"].target, tests["t_login"].app_id) == ("android", "com.example.shop")
    assert tests["t_checkout"].outcome == "failed"
    assert [r.result for r in tests["t_checkout"].requirements].count("failed") == 1
    assert tests["t_checkout"].uses_endpoints == ("create_voucher",)
    assert tests["t_search"].target == "web"
    assert tests["t_onboarding"].app_id == "com.example.shop.ios"
    assert [(b.platform, b.app_id) for b in seed.builds] == [("ios", "com.example.shop.ios")]
    assert [e.name for e in seed.endpoints] == ["create_voucher"]
    assert load_seed(demo_seed_data()) == load_seed(demo_seed_data())
    assert demo_seed_data() is not demo_seed_data()


BAD: list[tuple[str, Callable[[dict[str, Any]], object], str]] = [
    ("no projects", lambda s: s.pop("projects"), "seed.projects: is required"),
    ("unknown top key", lambda s: s.update(runs=[]), "seed: unknown key 'runs'"),
    (
        "project id",
        lambda s: s["projects"][0].update(id="a"),
        "projects[0].id: must start with 'p_'",
    ),
    ("plan", lambda s: s["projects"][0].update(plan="gold"), "projects[0].plan: must be one of"),
    ("typo", lambda s: s["tests"][0].update(duration=5), "tests[0]: unknown key 'duration'"),
    ("target", lambda s: s["tests"][0].update(target="tv"), "tests[0].target: must be one of"),
    ("web app id", lambda s: s["tests"][0].update(appId="x"), "tests[0].appId: is only for"),
    ("no url", lambda s: s["tests"][0].pop("url"), "tests[0].url: is required"),
    ("jitter", lambda s: s["tests"][0].update(durationJitter=2), "tests[0].durationJitter"),
    ("duration", lambda s: s["tests"][0].update(durationSeconds="5"), "must be a number"),
    (
        "requirement",
        lambda s: s["tests"][3]["requirements"][0].update(result="ok"),
        "tests[3].requirements[0].result",
    ),
    ("test project", lambda s: s["tests"][0].update(project="p_x"), "no project 'p_x'"),
    ("key project", lambda s: s["keys"][0].update(projects=["p_x"]), "keys[0].projects"),
    ("capability", lambda s: s["keys"][0].update(capability="admin"), "keys[0].capability"),
    ("same key", lambda s: s["keys"][1].update(key="k-run"), "listed twice"),
    ("same id", lambda s: s["tests"][1].update(id="t_web"), "tests[1].id: 't_web' is used twice"),
    ("pin", lambda s: s["tests"][2].update(pinnedBuild="ab_b_1"), "tests[2].pinnedBuild"),
    ("pin ghost", lambda s: s["tests"][2].update(pinnedBuild="ab_zz"), "no build 'ab_zz'"),
    ("code", lambda s: s["builds"][2].update(versionCode="1a"), "builds[2].versionCode"),
    ("endpoint", lambda s: s["endpoints"][0].update(url="http://x"), "endpoints[0].url: url must"),
    ("endpoint name", lambda s: s["endpoints"][0].update(name="n" * 41), "endpoints[0].name"),
    ("tables", lambda s: s.update(tests={"id": "t_x"}), "seed.tests: must be a list"),
]


@pytest.mark.parametrize(("case", "change", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_seeds_are_one_line_naming_file_and_place(
    tmp_path: Path, case: str, change: Callable[[dict[str, Any]], object], words: str
) -> None:
    data = json.loads(json.dumps(SMALL_SEED))
    change(data)
    path = write(tmp_path, "bad.json", json.dumps(data))
    with pytest.raises(SeedError) as caught:
        load_seed(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    assert words in message


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("bad.json", "{nope", "not valid JSON"),
        ("bad.toml", "[[projects]\nid=", "not valid TOML"),
        ("seed.yaml", "a: 1", "must end in .json or .toml"),
        ("list.json", "[]", "seed: must be a table/object"),
    ],
)
def test_unreadable_seed_files(tmp_path: Path, name: str, text: str, words: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(SeedError, match=words) as caught:
        load_seed(path)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(str(path))


def test_a_missing_seed_file(tmp_path: Path) -> None:
    with pytest.raises(SeedError, match=r"missing\.toml: cannot read the file"):
        load_seed(tmp_path / "missing.toml")


def test_a_bad_seed_fails_when_the_service_is_made(tmp_path: Path) -> None:
    with pytest.raises(SeedError):
        FakeService(write(tmp_path, "x.json", "{}"))


_ONE_PROJECT = {
    "projects": [{"id": "p_x"}],
    "keys": [{"key": "k", "capability": "run", "projects": ["p_x"]}],
}


@pytest.mark.parametrize(
    ("platform", "name"),
    [
        ("android", "../shop.apk"),
        ("android", "dir/shop.apk"),
        ("android", "dir\\shop.apk"),
        ("android", ".apk"),
        ("android", "shop.app.zip"),
        ("ios", "Shop.apk"),
    ],
)
def test_a_builds_file_name_is_one_app_file_name(platform: str, name: str) -> None:
    """A seed's `fileName` names a file in the build's own folder: no path, no hidden name,
    the platform's suffix; anything else is one line naming the key."""
    build = {"id": "ab_x", "project": "p_x", "platform": platform, "appId": "org.example.x"}
    seed = {**_ONE_PROJECT, "builds": [{**build, "fileName": name}]}
    with pytest.raises(SeedError, match="fileName") as caught:
        load_seed(seed)
    assert len(str(caught.value).splitlines()) == 1


def test_a_builds_file_name_is_the_one_uploaded() -> None:
    build = {"id": "ab_x", "project": "p_x", "platform": "android", "appId": "org.example.x"}
    seed = load_seed({**_ONE_PROJECT, "builds": [{**build, "fileName": "app.apk"}]})
    assert seed.builds[0].file_name == "app.apk"
