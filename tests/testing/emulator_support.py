"""Helpers of the emulator's tests: a raw aiohttp client (Http) and a condition wait.

The tests drive the emulator over real loopback HTTP with plain aiohttp, never with the client.
"""

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import attrs
from multidict import CIMultiDict

from asyncclient.testing._bodies import part_etag

_DEFAULT = object()


@attrs.frozen
class Reply:
    status: int
    headers: Mapping[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)

    @property
    def code(self) -> str:
        return str(self.json["error"]["code"])


class Http:
    """Plain aiohttp requests to the emulator; `key` is sent as the Bearer token."""

    def __init__(self, session: aiohttp.ClientSession, key: str | None) -> None:
        self.session = session
        self.key = key

    def as_key(self, key: str | None) -> "Http":
        return Http(self.session, key)

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = _DEFAULT,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> Reply:
        sent = dict(headers or {})
        if self.key is not None:
            sent.setdefault("Authorization", f"Bearer {self.key}")
        kwargs: dict[str, Any] = {"headers": sent, "params": params}
        if json is not _DEFAULT:
            kwargs["json"] = json
        if data is not None:
            kwargs["data"] = data
        async with self.session.request(method, path, **kwargs) as response:
            return Reply(response.status, CIMultiDict(response.headers), await response.read())

    async def get(self, path: str, **kwargs: Any) -> Reply:
        return await self.call("GET", path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> Reply:
        return await self.call("POST", path, **kwargs)

    async def upload(self, data: bytes, file_name: str, *, project: str = "p_demo") -> Reply:
        """Start, send every part, complete: the Complete reply."""
        started = await self.post(
            f"/api/v1/projects/{project}/builds", json={"fileName": file_name, "size": len(data)}
        )
        assert started.status == 201, started.raw
        build_id, part_bytes = started.json["id"], started.json["partBytes"]
        parts = []
        for number in range(1, started.json["parts"] + 1):
            chunk = data[(number - 1) * part_bytes : number * part_bytes]
            sent = await self.call("PUT", f"/api/v1/builds/{build_id}/parts/{number}", data=chunk)
            assert sent.status == 200, sent.raw
            assert sent.json["etag"] == part_etag(chunk)
            parts.append({"partNumber": number, "etag": sent.json["etag"]})
        return await self.post(f"/api/v1/builds/{build_id}/complete", json={"parts": parts})


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Wait for the server's handlers (on this loop) to get somewhere; fails after 5 s."""
    async with asyncio.timeout(5):
        # The handlers run on this very loop: yielding to it is all the waiting there is.
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.001)


# A seed with two projects (paid and free), keys of each capability, a key of one project only,
# a pinned build, an endpoint with a secret header, and tests for every run rule.
SECRET = "s3cret-header-value"
SMALL_SEED: dict[str, Any] = {
    "projects": [
        {"id": "p_a", "name": "A", "plan": "paid", "includedRuns": 2},
        {"id": "p_b", "name": "B", "plan": "free", "includedRuns": 5},
        {"id": "p_empty", "name": "Empty", "plan": "paid"},
    ],
    "keys": [
        {"key": "k-run", "capability": "run", "projects": ["p_a", "p_b", "p_empty"]},
        {"key": "k-edit", "capability": "edit", "projects": ["p_a", "p_b", "p_empty"]},
        {"key": "k-b-only", "capability": "edit", "projects": ["p_b"]},
    ],
    "tests": [
        {
            "id": "t_web",
            "project": "p_a",
            "title": "Web",
            "target": "web",
            "url": "https://a.example.com",
            "queuedSeconds": 10,
            "durationSeconds": 100,
            "learnedPath": "none",
            "screenshots": 2,
        },
        {
            "id": "t_app",
            "project": "p_a",
            "title": "App",
            "target": "android",
            "appId": "com.example.shop",
            "queuedSeconds": 10,
            "durationSeconds": 100,
            "learnedPath": "fresh",
        },
        {
            "id": "t_pinned",
            "project": "p_a",
            "title": "Pinned",
            "target": "ios",
            "appId": "com.example.shop.ios",
            "pinnedBuild": "ab_ios_1",
            "queuedSeconds": 10,
            "durationSeconds": 100,
            "learnedPath": "stale",
        },
        {
            "id": "t_fail",
            "project": "p_a",
            "title": "Fails",
            "target": "web",
            "url": "https://a.example.com/checkout",
            "outcome": "failed",
            "requirements": [
                {"title": "Cart", "result": "passed", "reason": "Two items."},
                {"title": "Voucher", "result": "failed", "reason": "The total did not change."},
            ],
            "captures": {"total": "$42.00"},
            "headline": "The voucher did not apply.",
            "usesEndpoints": ["hook"],
            "queuedSeconds": 10,
            "durationSeconds": 100,
        },
        {
            "id": "t_hooks",
            "project": "p_b",
            "title": "Hooks on a free plan",
            "target": "web",
            "url": "https://b.example.com",
            "usesEndpoints": ["hook"],
        },
    ],
    "builds": [
        {
            "id": "ab_ios_1",
            "project": "p_a",
            "platform": "ios",
            "appId": "com.example.shop.ios",
            "versionCode": "1",
        },
        {
            "id": "ab_ios_2",
            "project": "p_a",
            "platform": "ios",
            "appId": "com.example.shop.ios",
            "version": "1.1.0",
            "versionCode": "2",
        },
        {"id": "ab_b_1", "project": "p_b", "platform": "android", "appId": "com.example.b"},
    ],
    "endpoints": [
        {
            "id": "ep_hook",
            "project": "p_a",
            "name": "hook",
            "description": "Makes a voucher.",
            "url": "https://hooks.example.com/voucher",
            "headers": {"X-Secret": SECRET},
        }
    ],
}
