"""A service's process, as an application would run one: one AsyncSession shared by many
concurrent calls for a long time. Run by tests/across/test_long_lived.py in its own Python:

    python tests/long_lived_client.py BASE_URL KEY CALLS quiet|debug|soak

quiet: no logging set up at all (the application configured none): prints "ok CALLS".
debug: a handler at DEBUG on `asyncclient` keeps every record; prints a JSON summary of them.
soak: prints JSON with the process's memory (RSS), descriptors and tasks along the way.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
from typing import Any

from asyncclient import AsyncSession

IN_FLIGHT = 50


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def calls(session: AsyncSession, count: int) -> None:
    slots = asyncio.Semaphore(IN_FLIGHT)

    async def one() -> None:
        async with slots:
            listed = await session.list_builds("p_demo")
            assert listed.builds

    await asyncio.gather(*(one() for _ in range(count)))


async def main(url: str, key: str, count: int, mode: str) -> None:
    kept: list[logging.LogRecord] = []
    if mode == "debug":

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                kept.append(record)

        logging.getLogger("asyncclient").addHandler(Keep(logging.DEBUG))
        logging.getLogger("asyncclient").setLevel(logging.DEBUG)
    idle_fds = descriptors()
    samples: list[dict[str, Any]] = []
    async with AsyncSession(key, url, connection_limit=16) as session:
        if mode != "soak":
            await calls(session, count)
        else:
            step = count // 10
            for done in range(step, count + 1, step):
                await calls(session, step)
                gc.collect()
                samples.append(
                    {
                        "calls": done,
                        "rssKib": rss_kib(),
                        "fds": descriptors(),
                        "tasks": len(asyncio.all_tasks()),
                    }
                )
    await asyncio.sleep(0)  # the connections' own close callbacks run
    if mode == "quiet":
        print("ok", count)
    elif mode == "soak":
        print(json.dumps({"idleFds": idle_fds, "closedFds": descriptors(), "samples": samples}))
    else:
        fields = ("operation", "attempt", "wait", "http_status", "error", "request_id")
        print(
            json.dumps(
                {
                    "levels": sorted({r.levelname for r in kept}),
                    "requests": [
                        {"status": r.http_status, "error": r.error}
                        for r in kept
                        if r.name == "asyncclient.requests"
                    ],
                    "retries": [
                        {
                            "logger": r.name,
                            "level": r.levelname,
                            **{f: getattr(r, f) for f in fields},
                        }
                        for r in kept
                        if r.name == "asyncclient.retries"
                    ],
                    "loggers": sorted({r.name for r in kept}),
                }
            )
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
