"""What the emulator starts with, as a model: projects, keys, tests, builds and endpoints.

Read and checked by `_seed_load` (files, dicts, the demo); `materialize_build` writes a seeded app.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs

from asyncclient.testing import builders

__all__ = [
    "ENDPOINT_METHODS",
    "HISTORY_STATUSES",
    "OUTCOMES",
    "Seed",
    "SeedBuild",
    "SeedEndpoint",
    "SeedError",
    "SeedKey",
    "SeedProject",
    "SeedRequirement",
    "SeedRun",
    "SeedTest",
    "endpoint_problem",
    "materialize_build",
]

OUTCOMES = ("passed", "failed", "blocked", "inconclusive", "error")
#: How a history run may have ended.
HISTORY_STATUSES = (*OUTCOMES, "cancelled")
ENDPOINT_METHODS = ("POST", "GET", "PUT", "PATCH", "DELETE")


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
class SeedRun:
    """A finished run of a test's history: `days_ago` before the service started, on the
    build `build` (an id; the build itself need not be in the seed: a run keeps what it knew
    of its build after the build is deleted), ending in `status`."""

    days_ago: float
    status: str
    build: str | None
    version: str | None = None
    duration_seconds: float | None = None
    queued_seconds: float | None = None
    # What a failing run said: headline and reason.
    headline: str | None = None
    reason: str | None = None
    # The true cause, for the labelled corpus: never served.
    label: str | None = None


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
    # Flaky: first `flaky_runs` fail, then `flaky_rate`; passed tests only.
    flaky_runs: int = 0
    flaky_rate: float = 0.0
    flaky_reason: str = "The next screen did not appear within the step's 10 s."
    flaky_status: str = "failed"  # how such a run ends: failed, error, inconclusive or blocked
    # brokenFrom: this build and later ones fail.
    broken_from: str | None = None
    broken_reason: str = "The checkout button is gone from the cart page."
    # Earlier days' finished runs, served as they are.
    history: tuple[SeedRun, ...] = ()


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
    file_name: str | None = None  # default: app id and version


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
    """A loaded seed: the projects, keys, tests, builds and endpoints the emulator starts with.

    Attributes:
        source: Where it came from (a file name, or "demo").
        projects: The projects.
        keys: The API keys and what each may do.
        tests: The tests and how their runs end.
        builds: The builds written at start.
        endpoints: The tester endpoints.
        dialect: The dialect the seed asks for, if any.
    """

    source: str
    projects: tuple[SeedProject, ...]
    keys: tuple[SeedKey, ...]
    tests: tuple[SeedTest, ...]
    builds: tuple[SeedBuild, ...]
    endpoints: tuple[SeedEndpoint, ...]
    #: The wire dialect (asyncclient.testing.dialects); None: default.
    dialect: str | None = None

    def first_key(self, capability: str) -> str | None:
        """The first key of `capability` (run or edit), or None.

        Args:
            capability: "run" or "edit".

        Returns:
            The key, or None when the seed has none with that capability.
        """
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


def materialize_build(build: SeedBuild, directory: Path) -> tuple[Path, str]:
    """Write a real app file for a seeded build with the builders; returns (path, file name)."""
    directory.mkdir(parents=True, exist_ok=True)
    if build.platform == "android":
        file_name = build.file_name or f"{build.app_id}-{build.version}.apk"
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
        file_name = build.file_name or f"{build.app_name}-{build.version}.app.zip"
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
