"""An ASGI service (Starlette) that keeps one AsyncSession for as long as it runs,
opened and closed by the lifespan.

Starlette and uvicorn come with the mcp extra (pip install '.[mcp]'). Run it from the
repository's root with ASYNCCLIENT_BASE_URL and ASYNCCLIENT_API_KEY set:
    uvicorn --app-dir docs/examples asgi_service:app --port 8001
    curl http://127.0.0.1:8001/builds/ab_demo_ios_100
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from asyncclient import AsyncSession, NotFoundError, ValidationError


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with AsyncSession(timeout=10) as session:
        app.state.asyncclient = session
        yield


async def build_status(request: Request) -> JSONResponse:
    session: AsyncSession = request.app.state.asyncclient
    try:
        build = await session.get_build(request.path_params["build_id"])
    except ValidationError as exc:  # not a build id: nothing was sent
        return JSONResponse({"error": str(exc)}, status_code=400)
    except NotFoundError as exc:
        body = {"error": str(exc), "requestId": exc.request_id}
        return JSONResponse(body, status_code=404)
    return JSONResponse({"id": build.id, "status": str(build.status)})


app = Starlette(routes=[Route("/builds/{build_id}", build_status)], lifespan=lifespan)
