"""Reading a seed (a .json or .toml file, a dict of the same camelCase shape, or the demo):
`load_seed` checks every key of every table and names the first problem in one line with its
file and place, so a bad seed fails at once instead of deep in the emulator.
"""

import copy
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from asyncclient._values._bounds import digits
from asyncclient.testing._demo_seed import DEMO
from asyncclient.testing._seed import (
    HISTORY_STATUSES,
    OUTCOMES,
    Seed,
    SeedBuild,
    SeedEndpoint,
    SeedError,
    SeedKey,
    SeedProject,
    SeedRequirement,
    SeedRun,
    SeedTest,
    endpoint_problem,
)

__all__ = ["demo_seed", "demo_seed_data", "load_seed"]

_TARGETS = ("android", "ios", "web")


class _Reader:
    """Reads one table of a seed, naming the place of every problem."""

    def __init__(self, source: str, where: str, data: Any, known: tuple[str, ...]) -> None:
        self.source = source
        self.where = where
        if not isinstance(data, Mapping):
            self.fail(f"must be a table/object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(known))
        if unknown:
            self.fail(f"unknown key {unknown[0]!r} (known: {', '.join(known)})")
        self.data = data

    def fail(self, problem: str, key: str | None = None) -> NoReturn:
        place = self.where if key is None else f"{self.where}.{key}"
        raise SeedError(f"{self.source}: {place}: {problem}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def text(self, key: str, default: str | None = None, *, prefix: str = "") -> str:
        value = self.data.get(key, default)
        if value is None:
            self.fail("is required", key)
        if not isinstance(value, str) or not value:
            self.fail(f"must be a non-empty string, got {value!r}", key)
        if prefix and (not value.startswith(prefix) or len(value) == len(prefix)):
            self.fail(f"must start with {prefix!r}, got {value!r}", key)
        return value

    def opt_text(self, key: str) -> str | None:
        return self.text(key) if self.has(key) else None

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None) -> str:
        value = self.data.get(key, default)
        if value not in choices:
            self.fail(f"must be one of {', '.join(choices)}, got {value!r}", key)
        assert isinstance(value, str)
        return value

    def number(self, key: str, default: float, low: float, high: float | None = None) -> float:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"must be a number, got {value!r}", key)
        if value < low or (high is not None and value > high):
            bounds = f"at least {low}" if high is None else f"between {low} and {high}"
            self.fail(f"must be {bounds}, got {value!r}", key)
        return float(value)

    def integer(self, key: str, default: int, low: int, high: int | None = None) -> int:
        value = self.number(key, default, low, high)
        if value != int(value):
            self.fail(f"must be a whole number, got {self.data.get(key)!r}", key)
        return int(value)

    def text_list(self, key: str, default: tuple[str, ...] | None = ()) -> tuple[str, ...]:
        value = self.data.get(key)
        if value is None:
            if default is None:
                self.fail("is required", key)
            return default
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.fail(f"must be a list of non-empty strings, got {value!r}", key)
        return tuple(value)

    def table_list(self, key: str, required: bool = False) -> list[Any]:
        value = self.data.get(key)
        if value is None:
            if required:
                self.fail("is required and must hold at least one entry", key)
            return []
        if not isinstance(value, list) or (required and not value):
            self.fail("must be a list (an array of tables in TOML)", key)
        return value


def _project(source: str, where: str, data: Any) -> SeedProject:
    r = _Reader(source, where, data, ("id", "name", "plan", "includedRuns"))
    pid = r.text("id", prefix="p_")
    return SeedProject(
        id=pid,
        name=r.text("name", pid),
        plan=r.choice("plan", ("paid", "free"), "paid"),
        included_runs=r.integer("includedRuns", 100, 0),
    )


def _key(source: str, where: str, data: Any) -> SeedKey:
    r = _Reader(source, where, data, ("key", "capability", "projects"))
    key = r.text("key")
    if any(c.isspace() for c in key):
        r.fail("must not contain whitespace", "key")
    return SeedKey(key, r.choice("capability", ("run", "edit")), r.text_list("projects", None))


def _requirement(source: str, where: str, data: Any) -> SeedRequirement:
    r = _Reader(source, where, data, ("title", "result", "reason"))
    return SeedRequirement(
        title=r.text("title"),
        result=r.choice("result", ("passed", "failed", "skipped")),
        reason=r.text("reason"),
    )


_TEST_KEYS = (
    "id",
    "project",
    "title",
    "target",
    "appId",
    "url",
    "outcome",
    "requirements",
    "captures",
    "headline",
    "durationSeconds",
    "queuedSeconds",
    "durationJitter",
    "learnedPath",
    "usesEndpoints",
    "pinnedBuild",
    "screenshots",
    "flakyRuns",
    "flakyRate",
    "flakyReason",
    "flakyStatus",
    "brokenFrom",
    "brokenReason",
    "history",
)


def _history_run(source: str, where: str, data: Any, target: str) -> SeedRun:
    r = _Reader(
        source,
        where,
        data,
        (
            "daysAgo",
            "status",
            "build",
            "version",
            "durationSeconds",
            "queuedSeconds",
            "headline",
            "reason",
            "label",
        ),
    )
    build = r.opt_text("build")
    if target == "web" and build is not None:
        r.fail("is only for android and ios tests (a web test runs without a build)", "build")
    if target != "web" and build is None:
        r.fail("is required for an app test's run (the build it ran on, ab_...)", "build")
    if build is not None and not build.startswith("ab_"):
        r.fail(f"must start with 'ab_', got {build!r}", "build")
    if not r.has("daysAgo"):
        r.fail("is required: how many days before the service started the run was", "daysAgo")
    duration = r.number("durationSeconds", 30.0, 0.001) if r.has("durationSeconds") else None
    queued = r.number("queuedSeconds", 1.0, 0.0) if r.has("queuedSeconds") else None
    return SeedRun(
        days_ago=r.number("daysAgo", 0.0, 0.0, 3650.0),
        status=r.choice("status", HISTORY_STATUSES),
        build=build,
        version=r.opt_text("version"),
        duration_seconds=duration,
        queued_seconds=queued,
        headline=r.opt_text("headline"),
        reason=r.opt_text("reason"),
        label=r.opt_text("label"),
    )


def _test(source: str, where: str, data: Any) -> SeedTest:
    r = _Reader(source, where, data, _TEST_KEYS)
    tid = r.text("id", prefix="t_")
    target = r.choice("target", _TARGETS)
    app_id = url = None
    if target == "web":
        if r.has("appId"):
            r.fail("is only for android and ios tests", "appId")
        url = r.text("url")
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            r.fail(f"must be an http(s) address, got {url!r}", "url")
    else:
        if r.has("url"):
            r.fail("is only for web tests", "url")
        app_id = r.text("appId")
    captures = r.data.get("captures", {})
    if not isinstance(captures, Mapping) or not all(
        isinstance(v, str | int | float | bool) for v in captures.values()
    ):
        r.fail("must be a table/object of names to strings, numbers or booleans", "captures")
    pinned = r.opt_text("pinnedBuild")
    if pinned is not None and target == "web":
        r.fail("is only for android and ios tests", "pinnedBuild")
    requirements = tuple(
        _requirement(source, f"{where}.requirements[{i}]", item)
        for i, item in enumerate(r.table_list("requirements"))
    )
    return SeedTest(
        id=tid,
        project=r.text("project"),
        title=r.text("title", tid),
        target=target,
        app_id=app_id,
        url=url,
        outcome=r.choice("outcome", OUTCOMES, "passed"),
        requirements=requirements,
        captures=dict(captures),
        headline=r.opt_text("headline"),
        duration_seconds=r.number("durationSeconds", 30.0, 0.001),
        queued_seconds=r.number("queuedSeconds", 3.0, 0.0),
        duration_jitter=r.number("durationJitter", 0.0, 0.0, 1.0),
        learned_path=r.choice("learnedPath", ("fresh", "stale", "none"), "none"),
        uses_endpoints=r.text_list("usesEndpoints"),
        pinned_build=pinned,
        screenshots=r.integer("screenshots", 3, 0, 99),
        history=tuple(
            _history_run(source, f"{where}.history[{i}]", item, target)
            for i, item in enumerate(r.table_list("history"))
        ),
        **_flaky(r),
        **_broken(r, target),
    )


def _broken(r: "_Reader", target: str) -> dict[str, Any]:
    """brokenFrom / brokenReason: an app test that passes until a build, and fails from it."""
    if not (r.has("brokenFrom") or r.has("brokenReason")):
        return {}
    if target == "web":
        r.fail("is only for android and ios tests (a build breaks them)", "brokenFrom")
    if r.data.get("outcome", "passed") != "passed":
        r.fail("makes only a test whose outcome is passed break", "brokenFrom")
    broken: dict[str, Any] = {"broken_from": r.text("brokenFrom")}
    if not broken["broken_from"].startswith("ab_"):
        r.fail("must be a build id (ab_...)", "brokenFrom")
    if r.has("brokenReason"):
        broken["broken_reason"] = r.text("brokenReason")
    return broken


def _flaky(r: "_Reader") -> dict[str, Any]:
    """flakyRuns / flakyRate / flakyReason / flakyStatus: only a test that passes can be made
    flaky."""
    given = [key for key in ("flakyRuns", "flakyRate", "flakyReason", "flakyStatus") if r.has(key)]
    if not given:
        return {}
    if r.data.get("outcome", "passed") != "passed":
        r.fail("makes only a test whose outcome is passed flaky", given[0])
    flaky: dict[str, Any] = {
        "flaky_runs": r.integer("flakyRuns", 0, 0, 1000),
        "flaky_rate": r.number("flakyRate", 0.0, 0.0, 1.0),
    }
    if r.has("flakyReason"):
        flaky["flaky_reason"] = r.text("flakyReason")
    if r.has("flakyStatus"):
        flaky["flaky_status"] = r.choice(
            "flakyStatus", ("failed", "error", "inconclusive", "blocked")
        )
    return flaky


_BUILD_KEYS = (
    "id",
    "project",
    "platform",
    "appId",
    "appName",
    "version",
    "versionCode",
    "label",
    "minOs",
    "abis",
    "platforms",
    "fileName",
)


def _build(source: str, where: str, data: Any) -> SeedBuild:
    r = _Reader(source, where, data, _BUILD_KEYS)
    platform = r.choice("platform", ("android", "ios"))
    raw_code = r.data.get("versionCode", "1")
    if isinstance(raw_code, bool) or not isinstance(raw_code, str | int):
        r.fail(f"must be a string or a whole number, got {raw_code!r}", "versionCode")
    version_code = str(raw_code)
    if platform == "android" and not digits(version_code):
        r.fail(f"must be a whole number on android, got {raw_code!r}", "versionCode")
    min_os = r.opt_text("minOs")
    if platform == "android" and min_os is not None and not digits(min_os):
        r.fail(f"must be an API level such as '24' on android, got {min_os!r}", "minOs")
    if platform == "android" and r.has("platforms"):
        r.fail("is only for ios builds", "platforms")
    file_name = r.opt_text("fileName")
    suffix = ".apk" if platform == "android" else ".app.zip"
    if file_name is not None and (
        not file_name.endswith(suffix) or file_name.startswith(".") or {"/", "\\"} & set(file_name)
    ):
        r.fail(f"must be a file name ending in {suffix}, got {file_name!r}", "fileName")
    return SeedBuild(
        id=r.text("id", prefix="ab_"),
        project=r.text("project"),
        platform=platform,
        app_id=r.text("appId"),
        app_name=r.text("appName", "Shop"),
        version=r.text("version", "1.0.0"),
        version_code=version_code,
        label=r.opt_text("label"),
        min_os=min_os,
        abis=r.text_list("abis") if r.has("abis") else None,
        platforms=r.text_list("platforms") if r.has("platforms") else None,
        file_name=file_name,
    )


def _endpoint(source: str, where: str, data: Any) -> SeedEndpoint:
    known = ("id", "project", "name", "description", "method", "url", "headers", "bodyTemplate")
    r = _Reader(source, where, data, known)
    endpoint = SeedEndpoint(
        id=r.text("id", prefix="ep_") if r.has("id") else None,
        project=r.text("project"),
        name=r.data.get("name"),  # type: ignore[arg-type]  # checked by endpoint_problem below
        description=r.data.get("description"),  # type: ignore[arg-type]
        method=r.data.get("method", "POST"),
        url=r.data.get("url"),  # type: ignore[arg-type]
        headers=dict(r.data.get("headers") or {}),
        body_template=r.data.get("bodyTemplate"),
    )
    problem = endpoint_problem(
        endpoint.name,
        endpoint.description,
        endpoint.method,
        endpoint.url,
        r.data.get("headers"),
        endpoint.body_template,
    )
    if problem is not None:
        r.fail(problem[1], problem[0])
    return endpoint


def _check_references(seed: Seed) -> None:
    def fail(where: str, problem: str) -> NoReturn:
        raise SeedError(f"{seed.source}: {where}: {problem}")

    projects = {p.id: p for p in seed.projects}
    for kind, items in (
        ("projects", seed.projects),
        ("tests", seed.tests),
        ("builds", seed.builds),
        ("endpoints", seed.endpoints),
    ):
        seen: set[str] = set()
        for i, item in enumerate(items):
            ident = getattr(item, "id", None)
            if ident is not None and ident in seen:
                fail(f"{kind}[{i}].id", f"{ident!r} is used twice")
            if ident is not None:
                seen.add(ident)
            owner = getattr(item, "project", None)
            if owner is not None and owner not in projects:
                fail(f"{kind}[{i}].project", f"no project {owner!r} in the seed")
    keys: set[str] = set()
    for i, key in enumerate(seed.keys):
        if key.key in keys:
            fail(f"keys[{i}].key", "the same key is listed twice")
        keys.add(key.key)
        for pid in key.projects:
            if pid not in projects:
                fail(f"keys[{i}].projects", f"no project {pid!r} in the seed")
    builds = {b.id: b for b in seed.builds}
    for i, test in enumerate(seed.tests):
        if test.pinned_build is None:
            continue
        build = builds.get(test.pinned_build)
        if build is None:
            fail(f"tests[{i}].pinnedBuild", f"no build {test.pinned_build!r} in the seed")
        if (build.project, build.platform, build.app_id) != (
            test.project,
            test.target,
            test.app_id,
        ):
            fail(
                f"tests[{i}].pinnedBuild",
                f"{build.id!r} is not a {test.target} build of {test.app_id} in {test.project}",
            )
    names: set[tuple[str, str]] = set()
    for i, endpoint in enumerate(seed.endpoints):
        if (endpoint.project, endpoint.name) in names:
            fail(f"endpoints[{i}].name", f"{endpoint.name!r} is already used in {endpoint.project}")
        names.add((endpoint.project, endpoint.name))


def _parse(source: str, data: Any) -> Seed:
    top = _Reader(
        source, "seed", data, ("projects", "keys", "tests", "builds", "endpoints", "dialect")
    )
    dialect = top.opt_text("dialect")

    def items(key: str, parse: Any, required: bool = False) -> tuple[Any, ...]:
        return tuple(
            parse(source, f"{key}[{i}]", item)
            for i, item in enumerate(top.table_list(key, required))
        )

    seed = Seed(
        source=source,
        projects=items("projects", _project, True),
        keys=items("keys", _key, True),
        tests=items("tests", _test),
        builds=items("builds", _build),
        endpoints=items("endpoints", _endpoint),
        dialect=dialect,
    )
    _check_references(seed)
    return seed


def load_seed(source: "str | os.PathLike[str] | Mapping[str, Any] | Seed") -> Seed:
    """A checked Seed from a .json or .toml file, or from a dict of the same (camelCase) shape.

    Raises SeedError with a one-line message naming the file and the problem.

    Args:
        source: A `.json` or `.toml` path, or a dict.

    Returns:
        The checked `Seed`.

    Raises:
        SeedError: The first problem, naming the file and the place.
    """
    if isinstance(source, Seed):
        return source
    if isinstance(source, Mapping):
        return _parse("seed", source)
    path = Path(source)
    name = str(source)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise SeedError(f"{name}: a seed file must end in .json or .toml")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SeedError(f"{name}: cannot read the file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except UnicodeDecodeError:
        raise SeedError(f"{name}: the file is not UTF-8 text") from None
    except RecursionError:
        raise SeedError(f"{name}: nested too deeply to be a seed") from None
    except tomllib.TOMLDecodeError as exc:
        raise SeedError(f"{name}: not valid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SeedError(f"{name}: not valid JSON: {exc}") from None
    return _parse(name, data)


def demo_seed_data(*, history: bool = True) -> dict[str, Any]:
    """The demo seed as the dict a JSON seed file would hold (a copy: a starting point).

    Args:
        history: Keep its two weeks of finished runs (False: a service no run has touched,
            for tests that count the runs they start).
    """
    data = copy.deepcopy(DEMO)
    if not history:
        for test in data["tests"]:
            test.pop("history", None)
    return data


def demo_seed() -> Seed:
    """The built-in demo: p_demo (paid), p_free (free), keys demo-run and demo-edit."""
    return _parse("demo seed", DEMO)
