"""An aiohttp.web service that keeps one AsyncSession for as long as it runs.

Run it from the repository's root with ASYNCCLIENT_BASE_URL and ASYNCCLIENT_API_KEY set
(`asyncclient serve` prints both):
    python docs/examples/aiohttp_service.py
    curl http://127.0.0.1:8000/builds/ab_demo_ios_100
"""

from collections.abc import AsyncIterator

from aiohttp import web

from asyncclient import (
    ApiError,
    AsyncClientError,
    AsyncSession,
    NotFoundError,
    ValidationError,
)

SESSION = web.AppKey("asyncclient", AsyncSession)


async def asyncclient_session(app: web.Application) -> AsyncIterator[None]:
    # One session, one connection pool, for every request the service handles; closed
    # at cleanup. A call in flight rides out a restart of the Test-Run Service
    # (retry_deadline).
    async with AsyncSession(timeout=10, retry_deadline=30) as session:
        app[SESSION] = session
        yield


async def build_status(request: web.Request) -> web.Response:
    session = request.app[SESSION]
    try:
        build = await session.get_build(request.match_info["build_id"])
    except ValidationError as exc:
        # The caller's own mistake (not a build id), refused before any request: a 400.
        return web.json_response({"error": str(exc)}, status=400)
    except NotFoundError as exc:
        body = {"error": str(exc), "requestId": exc.request_id}
        return web.json_response(body, status=404)
    except AsyncClientError as exc:
        # The service refused or could not be reached: a 502, with the service's
        # request id (when it answered) to find the call in its logs.
        request_id = exc.request_id if isinstance(exc, ApiError) else None
        body = {"error": str(exc), "requestId": request_id}
        return web.json_response(body, status=502)
    return web.json_response({"id": build.id, "status": str(build.status)})


def make_app() -> web.Application:
    app = web.Application()
    app.cleanup_ctx.append(asyncclient_session)
    app.router.add_get("/builds/{build_id}", build_status)
    return app


if __name__ == "__main__":
    web.run_app(make_app(), host="127.0.0.1", port=8000)
