"""The emulator's own routes, outside the API: the run result page and `/_emulator/*` controls.

Stats, the clock, bulk runs, a sink for bodies, network conditions and faults (no key needed).
"""

import html
import json
import secrets
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from asyncclient.testing._bodies import receive
from asyncclient.testing._clock import to_iso
from asyncclient.testing._conditions import Fault, NetworkConditions
from asyncclient.testing._errors import ServiceError, invalid
from asyncclient.testing._http import (
    STATE,
    base_url,
    json_answer,
    json_body,
    read_body,
    req_str,
    run_mode,
)
from asyncclient.testing.dialects.base import Dialect

__all__ = ["ROUTES"]

_PAGE_DIALECT = Dialect()


async def result_page(request: web.Request) -> web.Response:
    backend = request.app[STATE].backend
    run = backend.run_store.find_run(request.match_info["run_id"])
    if run is None:
        raise ServiceError(404, "not_found", "no such run")
    now = backend.now()
    # The page people read is the same in every dialect.
    view = _PAGE_DIALECT.run_full_view(run, run.status_at(now), now, base_url(request))
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(r['result'])}</td><td>{esc(r['title'])}</td><td>{esc(r['reason'])}</td></tr>"
        for r in view["requirements"]
    )
    captures = "".join(
        f"<li>{esc(str(k))}: {esc(str(v))}</li>" for k, v in (view["captures"] or {}).items()
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(view["testTitle"])} - {esc(run.id)}</title>
<meta http-equiv="refresh" content="{"3600" if view["final"] else "2"}"></head>
<body><h1>{esc(view["testTitle"])}</h1>
<p>Run <code>{esc(run.id)}</code> of <code>{esc(view["testId"])}</code>:
<strong>{esc(view["status"])}</strong> (mode {esc(view["mode"])}, {esc(view["platform"])})</p>
<p>{esc(view["headline"] or "The run is not final yet; this page refreshes itself.")}</p>
<table><tr><th>Result</th><th>Check</th><th>Reason</th></tr>{rows}</table>
<ul>{captures}</ul>
</body></html>
"""
    return web.Response(text=page, content_type="text/html")


async def emulator_stats(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return json_answer(
        {
            "requests": dict(state.counts),
            "maxIds": state.max_ids,
            "runs": len(state.backend.runs),
            "builds": len(state.backend.builds),
            "cpuSeconds": time.process_time(),
            "linkBytes": state.plan.link.bytes,
            "now": to_iso(state.backend.now()),
        }
    )


async def emulator_advance(request: web.Request) -> web.Response:
    backend = request.app[STATE].backend
    data = await json_body(request, ("seconds",), required=True)
    seconds = data.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise invalid("seconds", "seconds must be a number of at least 0")
    backend.clock.advance(float(seconds))
    return json_answer({"now": to_iso(backend.now())})


async def emulator_runs(request: web.Request) -> web.Response:
    backend = request.app[STATE].backend
    data = await json_body(request, ("testId", "count", "mode"), required=True)
    count = data.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100_000:
        raise invalid("count", "count must be a whole number from 1 to 100000")
    runs = backend.run_store.create_runs(req_str(data, "testId"), count, run_mode(data))
    return json_answer({"runIds": [run.id for run in runs]}, 201)


async def emulator_sink(request: web.Request) -> web.Response:
    state = request.app[STATE]
    dest = state.incoming / f"sink-{secrets.token_hex(6)}"
    plan = state.plan
    digest, length = await receive(
        request,
        dest,
        state.backend.settings.max_bytes,
        plan.conditions.part_bandwidth,
        link=plan.link.take if plan.conditions.link_bandwidth else None,
    )
    dest.unlink(missing_ok=True)
    return json_answer({"bytes": length, "sha256": digest})


async def emulator_get_conditions(request: web.Request) -> web.Response:
    return json_answer(request.app[STATE].plan.conditions.to_json())


async def emulator_put_conditions(request: web.Request) -> web.Response:
    plan = request.app[STATE].plan
    try:
        data = json.loads(await read_body(request) or b"{}")
        plan.conditions = NetworkConditions.from_json(data)
    except (ValueError, TypeError) as exc:
        raise invalid("conditions", str(exc)) from None
    return json_answer(plan.conditions.to_json())


async def emulator_faults(request: web.Request) -> web.Response:
    plan = request.app[STATE].plan
    data = await json_body(request, ("op", "kind", "times", "retryAfter"), required=True)
    try:
        fault = Fault(str(data.get("kind")), int(data.get("times", 1)), data.get("retryAfter"))
        plan.inject(str(data.get("op")), fault)
    except (ValueError, TypeError) as exc:
        raise invalid("fault", str(exc)) from None
    return json_answer({"op": data["op"], "pending": plan.pending(str(data["op"]))}, 201)


#: (method, path, handler, name) of our own routes.
ROUTES: list[tuple[str, str, Callable[[web.Request], Awaitable[web.StreamResponse]], str]] = [
    ("GET", "/runs/{run_id}", result_page, "result_page"),
    ("GET", "/_emulator/stats", emulator_stats, "emulator_stats"),
    ("POST", "/_emulator/advance", emulator_advance, "emulator_advance"),
    ("POST", "/_emulator/runs", emulator_runs, "emulator_runs"),
    ("PUT", "/_emulator/sink", emulator_sink, "emulator_sink"),
    ("GET", "/_emulator/conditions", emulator_get_conditions, "emulator_get_conditions"),
    ("PUT", "/_emulator/conditions", emulator_put_conditions, "emulator_put_conditions"),
    ("POST", "/_emulator/faults", emulator_faults, "emulator_faults"),
]
