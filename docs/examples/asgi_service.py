"""An ASGI service (Starlette) that keeps one AsyncSession for the application's lifetime,
opened and closed by the lifespan.

Run it with ASYNCCLIENT_BASE_URL and ASYNCCLIENT_API_KEY set (`asyncclient serve` prints both):
    uvicorn --app-dir docs/examples asgi_service:app --port 8000
    curl http://127.0.0.1:8000/builds/ab_demo_ios_100
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from asyncclient import AsyncSession, NotFoundError


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with AsyncSession(timeout=10) as session:
        app.state.asyncclient = session
        yield


async def build_status(request: Request) -> JSONResponse:
    session: AsyncSession = request.app.state.asyncclient
    try:
        build = await session.get_build(request.path_params["build_id"])
    except NotFoundError as exc:
        return JSONResponse({"error": str(exc), "requestId": exc.request_id}, status_code=404)
    return JSONResponse({"id": build.id, "status": str(build.status)})


app = Starlette(routes=[Route("/builds/{build_id}", build_status)], lifespan=lifespan)
