"""Configuration files with profiles (asyncclient.config) through the command line and the
library: where they are found, the order of precedence, `config show`/`config path`, and each
refusal. Two emulators tell which address a command reached."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from asyncclient import AsyncSession, ValidationError, load_config
from asyncclient.testing import FakeService

KEY = "a-secret-key-0f9e8d7c"


@pytest.fixture
async def two() -> AsyncIterator[tuple[FakeService, FakeService]]:
    async with FakeService() as first, FakeService() as second:
        yield first, second


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder (a git repository) as the working folder, a user config folder, and
    no ASYNCCLIENT_* variable from the machine."""
    for name in list(os.environ):
        if name.startswith("ASYNCCLIENT_"):
            monkeypatch.delenv(name)
    project = tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    (project / "app" / "src").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(project)
    return project


def user_file(home: Path, text: str, mode: int = 0o600) -> Path:
    path = home.parent / "xdg" / "asyncclient" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def reached(svc: FakeService) -> int:
    return len(svc.requests_for("list_builds"))


async def test_each_step_of_the_order(
    home: Path, two: tuple[FakeService, FakeService], run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two
    key = {"ASYNCCLIENT_API_KEY": first.run_key}
    # The user file points at the second; the project file at the first: the project wins.
    user_file(home, f'base_url = "{second.url}"\n')
    (home / "asyncclient.toml").write_text(f'base_url = "{first.url}"\n')
    assert (await run_cli("builds", "list", "p_demo", env=key)).code == 0
    assert (reached(first), reached(second)) == (1, 0)
    # The variable wins over the files.
    variable = {**key, "ASYNCCLIENT_BASE_URL": second.url}
    assert (await run_cli("builds", "list", "p_demo", env=variable)).code == 0
    assert (reached(first), reached(second)) == (1, 1)
    # The flag wins over the variable.
    flagged = await run_cli("builds", "list", "p_demo", "--base-url", first.url, env=variable)
    assert flagged.code == 0
    assert (reached(first), reached(second)) == (2, 1)
    # Without the project file the user file counts.
    (home / "asyncclient.toml").unlink()
    assert (await run_cli("builds", "list", "p_demo", env=key)).code == 0
    assert (reached(first), reached(second)) == (2, 2)


async def test_a_profile_from_the_flag_or_the_variable(
    home: Path, two: tuple[FakeService, FakeService], run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two
    key = {"ASYNCCLIENT_API_KEY": first.run_key}
    (home / "asyncclient.toml").write_text(
        f'base_url = "{first.url}"\n\n[profiles.staging]\nbase_url = "{second.url}"\n'
    )
    assert (await run_cli("builds", "list", "p_demo", "--profile", "staging", env=key)).code == 0
    assert (reached(first), reached(second)) == (0, 1)
    monkeypatch.setenv("ASYNCCLIENT_PROFILE", "staging")
    assert (await run_cli("builds", "list", "p_demo", env=key)).code == 0
    assert (reached(first), reached(second)) == (0, 2)
    unknown = await run_cli("builds", "list", "p_demo", "--profile", "prod", env=key)
    assert unknown.code == 2
    assert unknown.stderr.startswith(
        "error: unknown profile 'prod': the profiles defined are staging"
    )
    assert (reached(first), reached(second)) == (0, 2)


async def test_a_file_is_found_from_a_sub_folder_and_in_pyproject(
    home: Path, two: tuple[FakeService, FakeService], run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two
    key = {"ASYNCCLIENT_API_KEY": first.run_key}
    (home / "pyproject.toml").write_text(
        f'[project]\nname = "x"\n\n[tool.asyncclient]\nbase_url = "{second.url}"\n'
    )
    monkeypatch.chdir(home / "app" / "src")
    assert (await run_cli("builds", "list", "p_demo", env=key)).code == 0
    assert reached(second) == 1
    # asyncclient.toml in a parent comes before any pyproject.toml.
    (home / "app" / "asyncclient.toml").write_text(f'base_url = "{first.url}"\n')
    assert (await run_cli("builds", "list", "p_demo", env=key)).code == 0
    assert reached(first) == 1
    # Not above the repository root.
    (home.parent / "asyncclient.toml").write_text('base_url = "http://127.0.0.1:9"\n')
    (home / "app" / "asyncclient.toml").unlink()
    (home / "pyproject.toml").unlink()
    result = await run_cli("builds", "list", "p_demo", env=key)
    assert result.code == 2
    assert "--base-url" in result.stderr


async def test_config_show_names_each_origin_and_never_the_key(
    home: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = home / "asyncclient.toml"
    project.write_text(
        'base_url = "https://svc.example"\nretries = 2\nca_file = "certs/ca.pem"\n\n'
        '[run]\nretry_failed = 2\njunit = "out/r.xml"\n\n'
        "[profiles.ci]\nretries = 6\n"
    )
    user = user_file(home, f'api_key = "{KEY}"\nrequest_timeout = 12\n')
    monkeypatch.setenv("ASYNCCLIENT_RETRY_DEADLINE", "45")
    result = await run_cli("config", "show", "--profile", "ci", "--proxy", "direct", "--json")
    monkeypatch.delenv("ASYNCCLIENT_RETRY_DEADLINE")
    assert result.code == 0, result.stderr
    assert KEY not in result.stdout + result.stderr
    shown = result.json()
    assert shown["files"] == [str(project), str(user)]
    settings = shown["settings"]
    assert settings["base_url"] == {"value": "https://svc.example", "origin": f"{project}:1"}
    assert settings["retries"] == {"value": 6, "origin": f"{project}:10"}  # the profile's
    assert settings["ca_file"]["value"] == str(home / "certs" / "ca.pem")  # beside the file
    assert settings["proxy"] == {"value": "direct", "origin": "--proxy"}
    assert settings["retry_deadline"] == {"value": 45.0, "origin": "ASYNCCLIENT_RETRY_DEADLINE"}
    assert settings["request_timeout"] == {"value": 12.0, "origin": f"{user}:2"}
    assert settings["max_response_bytes"] == {"value": 33554432, "origin": "default"}
    assert settings["pool_timeout"] == {"value": None, "origin": "default"}
    assert settings["api_key"] == {"value": "set", "origin": f"{user}:1"}
    assert settings["run.retry_failed"] == {"value": 2, "origin": f"{project}:6"}
    assert settings["run.junit"]["value"] == str(home / "out" / "r.xml")
    text = await run_cli("config", "show")
    assert KEY not in text.stdout
    assert f"api_key             set  ({user}:1)" in text.stdout
    paths = await run_cli("config", "path")
    assert paths.stdout.splitlines() == [f"{project}  (read)", f"{user}  (read)"]


async def test_command_tables_give_defaults_that_flags_override(
    home: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asyncclient.cli import build_parser
    from asyncclient.cli._config import apply_config

    (home / "asyncclient.toml").write_text(
        '[run]\nretry_failed = 2\nhtml = "reports/r.html"\n\n[upload]\nconcurrency = 8\n\n'
        '[mcp]\ntoolsets = ["builds", "runs"]\n'
    )
    parser = build_parser()
    for argv, expected in [
        (["run", "project", "p_1", "--wait"], {"retry_failed": 2}),
        (["run", "project", "p_1", "--wait"], {"html": str(home / "reports" / "r.html")}),
        (["run", "project", "p_1", "--wait", "--retry-failed", "0"], {"retry_failed": 0}),
        (["upload", "p_1", "a.apk"], {"concurrency": 8}),
        (["upload", "p_1", "a.apk", "--concurrency", "3"], {"concurrency": 3}),
        (["mcp"], {"toolsets": ["builds,runs"]}),
    ]:  # fmt: skip
        args = parser.parse_args(argv)
        apply_config(args, argv)
        for name, value in expected.items():
            assert getattr(args, name) == value, (argv, name)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('retrys = 3\n', "asyncclient.toml:1: unknown key retrys: did you mean retries?"),
        ("[run]\nretry_faild = 1\n", "toml:2: unknown key run.retry_faild: did you mean retry_fa"),
        ('retries = "three"\n', "toml:1: retries must be a whole number, got str 'three'"),
        ('request_timeout = true\n', "asyncclient.toml:1: request_timeout must be a number"),
        ('base_url = "x"\nretries = \n', "asyncclient.toml:2: not valid TOML"),
        (f'api_key = "{KEY}"\n', "asyncclient.toml:1: api_key does not belong in a project file"),
    ],
)  # fmt: skip
async def test_each_mistake_is_one_line_exit_2_before_any_request(
    home: Path, run_cli: Any, text: str, message: str, two: tuple[FakeService, FakeService]
) -> None:
    first, _ = two
    (home / "asyncclient.toml").write_text(text)
    result = await run_cli(
        "builds",
        "list",
        "p_demo",
        env={"ASYNCCLIENT_BASE_URL": first.url, "ASYNCCLIENT_API_KEY": "k"},
    )
    assert result.code == 2
    assert result.stderr.count("\n") == 1
    assert message in result.stderr
    assert str(home / "asyncclient.toml") in result.stderr
    assert KEY not in result.stderr
    assert first.requests == []


async def test_a_key_in_a_user_file_others_can_read_is_refused_with_the_chmod(
    home: Path, run_cli: Any, two: tuple[FakeService, FakeService]
) -> None:
    first, _ = two
    user = user_file(home, f'base_url = "{first.url}"\napi_key = "{first.run_key}"\n', 0o644)
    result = await run_cli("builds", "list", "p_demo")
    assert result.code == 2
    assert f"run: chmod 600 {user}" in result.stderr
    assert first.run_key not in result.stderr
    user.chmod(0o600)
    result = await run_cli("builds", "list", "p_demo")
    assert result.code == 0, result.stderr
    assert reached(first) == 1


async def test_api_key_env_names_the_variable_and_a_401_names_it(
    home: Path, run_cli: Any, two: tuple[FakeService, FakeService], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _ = two
    (home / "asyncclient.toml").write_text(
        f'base_url = "{first.url}"\napi_key_env = "SHOP_TEST_KEY"\n'
    )
    monkeypatch.setenv("SHOP_TEST_KEY", "wrong-key-123456")
    result = await run_cli("builds", "list", "p_demo", "-v", env={})
    assert result.code == 3
    assert "SHOP_TEST_KEY" in result.stderr
    assert f"config: read {home / 'asyncclient.toml'}" in result.stderr  # -v says what was read
    assert "wrong-key-123456" not in result.stderr
    monkeypatch.setenv("SHOP_TEST_KEY", first.run_key)
    assert (await run_cli("builds", "list", "p_demo")).code == 0


async def test_an_unset_api_key_env_is_named_with_its_file(
    home: Path, run_cli: Any, two: tuple[FakeService, FakeService], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _ = two
    (home / "asyncclient.toml").write_text(
        f'base_url = "{first.url}"\napi_key_env = "TEST_RUNS_KEY"\n'
    )
    monkeypatch.delenv("TEST_RUNS_KEY", raising=False)
    result = await run_cli("builds", "list", "p_demo", env={})
    assert result.code == 2
    where = f"{home / 'asyncclient.toml'}:2"
    assert result.stderr.strip() == (
        f"error: no API key: set TEST_RUNS_KEY (api_key_env in {where}) or "
        "ASYNCCLIENT_API_KEY or pass --api-key"
    )
    assert reached(first) == 0
    with pytest.raises(ValidationError, match=r"set TEST_RUNS_KEY \(api_key_env in .*:2\)"):
        AsyncSession.from_config()


async def test_the_library_reads_the_same_files(
    home: Path, two: tuple[FakeService, FakeService], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two
    (home / "asyncclient.toml").write_text(
        f'base_url = "{first.url}"\nretries = 1\n[profiles.b]\nbase_url = "{second.url}"\n'
    )
    user_file(home, f'api_key = "{first.run_key}"\n')
    config = load_config(profile="b")
    assert config.settings["base_url"].value == second.url
    assert config.api_key_set
    assert KEY not in repr(config)
    assert first.run_key not in repr(config)
    async with AsyncSession.from_config(profile="b") as session:
        await session.list_builds("p_demo")
    assert reached(second) == 1
    # AsyncSession() alone reads no file.
    monkeypatch.delenv("XDG_CONFIG_HOME")
    with pytest.raises(ValidationError, match=r"ASYNCCLIENT_(API_KEY|BASE_URL)"):
        AsyncSession()


async def test_every_option_the_short_help_leaves_out_is_a_key_of_a_profile(
    home: Path, run_cli: Any
) -> None:
    """`run project --help` shows the few options a person types; each policy option it
    leaves out is set once in a profile (the ones naming the job itself excepted)."""
    import re

    from asyncclient._core._config_keys import COMMAND_KEYS, GLOBAL_KEYS

    short = (await run_cli("run", "project", "--help")).stdout
    full = (await run_cli("run", "project", "--help-all")).stdout
    assert len(short.splitlines()) < 60
    assert "--help-all" in short
    assert "--retry-strategy" not in short
    assert "--pre-existing" in full
    keys = {key.flag for key in [*COMMAND_KEYS["run"].values(), *GLOBAL_KEYS.values()]}
    per_job = {"--ref", "--commit", "--supersede", "--no-supersede", "--idempotency-key"}
    per_job |= {"--mode", "--json", "--quiet", "--verbose", "--version"}
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z](?=[\s,\])])", full))
    hidden = {option for option in options if not re.search(rf"{option}(?![\w-])", short)}
    assert hidden, "the short help hides nothing"
    assert sorted(hidden - keys - per_job) == []


async def test_a_profile_holds_the_policy_of_a_suite(home: Path, run_cli: Any) -> None:
    from asyncclient.cli import build_parser
    from asyncclient.cli._config import apply_config
    from asyncclient.cli._follow_options import check_follow_options

    (home / "asyncclient.toml").write_text(
        '[profiles.ci.run]\nretry_failed = 2\nretry_strategy = "hedge"\nmax_failures = 3\n'
        'baseline = "auto"\npre_existing = "warn"\nnew_test_runs = 3\n'
    )
    argv = ["run", "project", "p_1", "--wait", "--profile", "ci"]
    args = build_parser().parse_args(argv)
    apply_config(args, argv)
    policy = check_follow_options(args, waiting=True).suite_policy
    assert policy is not None
    assert (policy.retry_failed, policy.retry_strategy, policy.max_failures) == (2, "hedge", 3)
    assert (policy.baseline, policy.pre_existing, policy.new_test_runs) == ("auto", "warn", 3)
