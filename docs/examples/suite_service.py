"""An aiohttp.web service that runs a project's suite with the library's loop,
streaming what happens as it happens, then the report.

    POST /suites/{project_id}?build=ab_...&build=ab_...

answers NDJSON: a line per event (the `--events` names and fields), then the report.
Run it from the repository's root with ASYNCCLIENT_BASE_URL and ASYNCCLIENT_API_KEY
set (`asyncclient serve` prints both):
    python docs/examples/suite_service.py
"""

import json
from collections.abc import AsyncIterator

from aiohttp import web

from asyncclient import (
    AsyncClientError,
    AsyncSession,
    SuitePolicy,
    SuiteRun,
    ValidationError,
)

SESSION = web.AppKey("asyncclient", AsyncSession)

# Each test that does not pass gets up to 2 more runs, all at once; a test the
# project's history shows flaky gets its copies from the start (hedge). Three tests
# failed for good stop the rest (fail-fast); re-runs and copies may take 30 minutes of
# device time in all.
POLICY = SuitePolicy(
    retry_failed=2,
    retry_strategy="hedge",
    max_failures=3,
    retry_budget=30,
)


async def asyncclient_session(app: web.Application) -> AsyncIterator[None]:
    async with AsyncSession(timeout=10, retry_deadline=30) as session:
        app[SESSION] = session
        yield


def line(value: dict[str, object]) -> bytes:
    return json.dumps(value).encode() + b"\n"


async def run_suite(request: web.Request) -> web.StreamResponse:
    session = request.app[SESSION]
    try:
        suite = SuiteRun.for_project(
            session,
            request.match_info["project_id"],
            build_ids=request.query.getall("build", []) or None,
            policy=POLICY,
        )
    except ValidationError as exc:  # the caller's mistake, before any request: a 400
        return web.json_response({"error": str(exc)}, status=400)
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)
    # If the caller goes away, leaving the block cancels the loop, which stops its runs.
    async with suite:
        try:
            async for event in suite:
                if event.streamed:
                    await response.write(line({"event": event.event, **event.fields()}))
            report = await suite.wait()
        except AsyncClientError as exc:  # the service refused or could not be reached
            await response.write(line({"event": "error", "error": str(exc)}))
            await response.write_eof()
            return response
    outcomes = {test.test_id: test.outcome for test in report.tests}
    await response.write(
        line({"event": "report", "passed": report.passed, "summary": report.summary,
              "tests": outcomes, **report.cost.fields()})
    )  # fmt: skip
    await response.write_eof()
    return response


def make_app() -> web.Application:
    app = web.Application()
    app.cleanup_ctx.append(asyncclient_session)
    app.router.add_post("/suites/{project_id}", run_suite)
    return app


if __name__ == "__main__":
    web.run_app(make_app(), host="127.0.0.1", port=8002)
