"""What the emulator starts with: the built-in demo seed and seed files (JSON or TOML, camelCase).

`load_seed` checks a seed completely and reports the first problem in one line naming the file.
"""

import copy
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import attrs

from asyncclient.testing import builders

__all__ = [
    "ENDPOINT_METHODS",
    "OUTCOMES",
    "Seed",
    "SeedBuild",
    "SeedEndpoint",
    "SeedError",
    "SeedKey",
    "SeedProject",
    "SeedRequirement",
    "SeedTest",
    "demo_seed",
    "demo_seed_data",
    "endpoint_problem",
    "load_seed",
    "materialize_build",
]

OUTCOMES = ("passed", "failed", "blocked", "inconclusive", "error")
ENDPOINT_METHODS = ("POST", "GET", "PUT", "PATCH", "DELETE")
_TARGETS = ("android", "ios", "web")


class SeedError(ValueError):
    """A seed that cannot be used; the message is one line naming the file and the problem."""


@attrs.frozen
class SeedProject:
    id: str
    name: str
    plan: str  # "paid" | "free"
    included_runs: int


@attrs.frozen
class SeedKey:
    key: str = attrs.field(repr=False)
    capability: str  # "run" | "edit"
    projects: tuple[str, ...]


@attrs.frozen
class SeedRequirement:
    title: str
    result: str  # "passed" | "failed" | "skipped"
    reason: str


@attrs.frozen
class SeedTest:
    id: str
    project: str
    title: str
    target: str  # "android" | "ios" | "web"
    app_id: str | None
    url: str | None
    outcome: str
    requirements: tuple[SeedRequirement, ...]
    captures: Mapping[str, Any]
    headline: str | None
    duration_seconds: float
    queued_seconds: float
    duration_jitter: float
    learned_path: str  # "fresh" | "stale" | "none"
    uses_endpoints: tuple[str, ...]
    pinned_build: str | None
    screenshots: int


@attrs.frozen
class SeedBuild:
    id: str
    project: str
    platform: str  # "android" | "ios"
    app_id: str
    app_name: str
    version: str
    version_code: str
    label: str | None
    min_os: str | None
    abis: tuple[str, ...] | None  # Android ABIs, or iOS architectures
    platforms: tuple[str, ...] | None  # iOS CFBundleSupportedPlatforms


@attrs.frozen
class SeedEndpoint:
    id: str | None
    project: str
    name: str
    description: str
    method: str
    url: str
    headers: Mapping[str, str] = attrs.field(repr=False)
    body_template: str | None


@attrs.frozen
class Seed:
    source: str
    projects: tuple[SeedProject, ...]
    keys: tuple[SeedKey, ...]
    tests: tuple[SeedTest, ...]
    builds: tuple[SeedBuild, ...]
    endpoints: tuple[SeedEndpoint, ...]
    #: The wire dialect the seed asks for (see asyncclient.testing.dialects), None for default.
    dialect: str | None = None

    def first_key(self, capability: str) -> str | None:
        return next((k.key for k in self.keys if k.capability == capability), None)


def endpoint_problem(
    name: Any, description: Any, method: Any, url: Any, headers: Any, body_template: Any
) -> tuple[str, str] | None:
    """(field, problem) for the first rule of the Endpoint table a value breaks, else None."""
    if not isinstance(name, str) or not 1 <= len(name) <= 40:
        return "name", "name must be a string of 1 to 40 characters"
    if not isinstance(description, str) or not 1 <= len(description) <= 600:
        return "description", "description must be a string of 1 to 600 characters"
    if method not in ENDPOINT_METHODS:
        return "method", f"method must be one of {', '.join(ENDPOINT_METHODS)}"
    if not isinstance(url, str) or not url.startswith("https://") or not urlsplit(url).hostname:
        return "url", "url must be an https:// address with a host"
    if headers is not None:
        if not isinstance(headers, Mapping):
            return "headers", "headers must be an object of header names to values"
        if len(headers) > 20:
            return "headers", "at most 20 headers are allowed"
        for header, value in headers.items():
            if not isinstance(header, str) or not header.strip() or not isinstance(value, str):
                return "headers", "header names must be non-empty strings and values strings"
    if body_template is not None and not isinstance(body_template, str):
        return "bodyTemplate", "bodyTemplate must be a string"
    return None


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
    )


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
)


def _build(source: str, where: str, data: Any) -> SeedBuild:
    r = _Reader(source, where, data, _BUILD_KEYS)
    platform = r.choice("platform", ("android", "ios"))
    raw_code = r.data.get("versionCode", "1")
    if isinstance(raw_code, bool) or not isinstance(raw_code, str | int):
        r.fail(f"must be a string or a whole number, got {raw_code!r}", "versionCode")
    version_code = str(raw_code)
    if platform == "android" and not version_code.isdigit():
        r.fail(f"must be a whole number on android, got {raw_code!r}", "versionCode")
    min_os = r.opt_text("minOs")
    if platform == "android" and min_os is not None and not min_os.isdigit():
        r.fail(f"must be an API level such as '24' on android, got {min_os!r}", "minOs")
    if platform == "android" and r.has("platforms"):
        r.fail("is only for ios builds", "platforms")
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
    except tomllib.TOMLDecodeError as exc:
        raise SeedError(f"{name}: not valid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SeedError(f"{name}: not valid JSON: {exc}") from None
    return _parse(name, data)


_DEMO: dict[str, Any] = {
    "projects": [
        {"id": "p_demo", "name": "Demo shop", "plan": "paid", "includedRuns": 100},
        {"id": "p_free", "name": "Free sandbox", "plan": "free", "includedRuns": 20},
    ],
    "keys": [
        {"key": "demo-run", "capability": "run", "projects": ["p_demo", "p_free"]},
        {"key": "demo-edit", "capability": "edit", "projects": ["p_demo", "p_free"]},
    ],
    "tests": [
        {
            "id": "t_login",
            "project": "p_demo",
            "title": "Log in with a valid account",
            "target": "android",
            "appId": "com.example.shop",
            "outcome": "passed",
            "requirements": [
                {
                    "title": "The login form accepts a valid account",
                    "result": "passed",
                    "reason": "Signed in as demo@example.com without an error message.",
                },
                {
                    "title": "The home screen greets the user by name",
                    "result": "passed",
                    "reason": "The home screen showed 'Welcome back, Dana'.",
                },
            ],
            "captures": {"user": "demo@example.com", "greeting": "Welcome back, Dana"},
            "headline": "Logged in and reached the home screen.",
            "durationSeconds": 30,
            "queuedSeconds": 3,
            "durationJitter": 0.3,
            "learnedPath": "fresh",
            "screenshots": 3,
        },
        {
            "id": "t_checkout",
            "project": "p_demo",
            "title": "Check out with a voucher",
            "target": "android",
            "appId": "com.example.shop",
            "outcome": "failed",
            "requirements": [
                {
                    "title": "The cart shows the added items",
                    "result": "passed",
                    "reason": "Both items and the total of $42.00 were on the cart screen.",
                },
                {
                    "title": "A voucher code reduces the total",
                    "result": "failed",
                    "reason": "The voucher SAVE10 from create_voucher was accepted, but the "
                    "total stayed $42.00 instead of $37.80.",
                },
                {
                    "title": "The order confirmation appears",
                    "result": "passed",
                    "reason": "The confirmation screen showed order number 10023.",
                },
            ],
            "captures": {"voucher": "SAVE10", "total": "$42.00", "order": "10023"},
            "headline": "The voucher was accepted but the total did not change.",
            "durationSeconds": 50,
            "queuedSeconds": 4,
            "durationJitter": 0.2,
            "learnedPath": "stale",
            "usesEndpoints": ["create_voucher"],
            "screenshots": 4,
        },
        {
            "id": "t_search",
            "project": "p_demo",
            "title": "Search the catalogue",
            "target": "web",
            "url": "https://shop.example.com",
            "outcome": "passed",
            "requirements": [
                {
                    "title": "Searching 'lamp' lists matching products",
                    "result": "passed",
                    "reason": "12 results, all with 'lamp' in the title.",
                }
            ],
            "captures": {"query": "lamp", "results": 12},
            "headline": "The search returned 12 matching products.",
            "durationSeconds": 20,
            "queuedSeconds": 2,
            "durationJitter": 0.25,
            "learnedPath": "none",
            "screenshots": 2,
        },
        {
            "id": "t_onboarding",
            "project": "p_demo",
            "title": "Finish onboarding",
            "target": "ios",
            "appId": "com.example.shop.ios",
            "outcome": "passed",
            "requirements": [
                {
                    "title": "Every onboarding page can be passed",
                    "result": "passed",
                    "reason": "Passed all 4 pages with Continue.",
                },
                {
                    "title": "Onboarding ends on the shop's front page",
                    "result": "passed",
                    "reason": "The front page with 'Today's picks' appeared.",
                },
            ],
            "captures": {"pages": 4},
            "headline": "Onboarding finished on the front page.",
            "durationSeconds": 40,
            "queuedSeconds": 3,
            "durationJitter": 0.3,
            "learnedPath": "fresh",
            "screenshots": 4,
        },
        {
            "id": "t_free_home",
            "project": "p_free",
            "title": "Open the home page",
            "target": "web",
            "url": "https://free.example.com",
            "outcome": "passed",
            "durationSeconds": 20,
            "queuedSeconds": 2,
        },
        {
            "id": "t_free_voucher",
            "project": "p_free",
            "title": "Redeem a voucher",
            "target": "web",
            "url": "https://free.example.com/redeem",
            "outcome": "passed",
            "usesEndpoints": ["create_voucher"],
            "durationSeconds": 25,
            "queuedSeconds": 2,
        },
    ],
    "builds": [
        {
            "id": "ab_demo_ios_100",
            "project": "p_demo",
            "platform": "ios",
            "appId": "com.example.shop.ios",
            "appName": "Shop",
            "version": "1.0.0",
            "versionCode": "100",
            "label": "seed",
        }
    ],
    "endpoints": [
        {
            "id": "ep_demo_voucher",
            "project": "p_demo",
            "name": "create_voucher",
            "description": "Creates a one-time voucher code for the demo shop. Use it when a test "
            'needs a valid voucher; it returns {"code": "..."}.',
            "method": "POST",
            "url": "https://shop.example.com/test-hooks/vouchers",
            "headers": {"X-Hook-Token": "demo-hook-secret"},
            "bodyTemplate": '{"percent": {{percent}}}',
        }
    ],
}


def demo_seed_data() -> dict[str, Any]:
    """The demo seed as the dict a JSON seed file would hold (a copy: a starting point)."""
    return copy.deepcopy(_DEMO)


def demo_seed() -> Seed:
    """The built-in demo: p_demo (paid), p_free (free), keys demo-run and demo-edit."""
    return _parse("demo seed", _DEMO)


def materialize_build(build: SeedBuild, directory: Path) -> tuple[Path, str]:
    """Write a real app file for a seeded build with the builders; returns (path, file name)."""
    directory.mkdir(parents=True, exist_ok=True)
    if build.platform == "android":
        file_name = f"{build.app_id}-{build.version}.apk"
        android: dict[str, Any] = {}
        if build.min_os is not None:
            android["min_sdk"] = int(build.min_os)
        if build.abis is not None:
            android["abis"] = build.abis
        path = builders.build_apk(
            directory / file_name,
            package=build.app_id,
            version_name=build.version,
            version_code=int(build.version_code),
            label=build.app_name,
            **android,
        )
    else:
        file_name = f"{build.app_name}-{build.version}.app.zip"
        ios: dict[str, Any] = {}
        if build.min_os is not None:
            ios["min_os"] = build.min_os
        if build.abis is not None:
            ios["archs"] = build.abis
        if build.platforms is not None:
            ios["platforms"] = build.platforms
        path = builders.build_app_zip(
            directory / file_name,
            bundle_id=build.app_id,
            name=build.app_name,
            version=build.version,
            build=build.version_code,
            **ios,
        )
    return Path(path), file_name
