"""The emulator's aiohttp application: every route and the handler that answers it.

The API's routes come from the operation table (asyncclient._core._operations) and each resource's
handlers (`_builds_http`, `_runs_http`, `_endpoints_http`); the emulator's own, `_emulator_http`.
"""

from collections.abc import Awaitable, Callable

from aiohttp import web

from asyncclient._core._operations import OPERATIONS as OPERATIONS_TABLE
from asyncclient.testing import _builds_http, _emulator_http, _endpoints_http, _runs_http
from asyncclient.testing._http import STATE, AppState
from asyncclient.testing._middleware import add_request_id, middleware

__all__ = ["make_app"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The handler of each operation of asyncclient._core._operations.
_HANDLERS: dict[str, Handler] = {
    **_builds_http.HANDLERS,
    **_runs_http.HANDLERS,
    **_endpoints_http.HANDLERS,
}


def make_app(state: AppState) -> web.Application:
    # Complete may list thousands of parts.
    app = web.Application(middlewares=[middleware], client_max_size=16 << 20)
    app.on_response_prepare.append(add_request_id)
    app[STATE] = state
    routes: list[tuple[str, str, Handler, str]] = [
        *(
            (operation.method, operation.route, _HANDLERS[name], name)
            for name, operation in OPERATIONS_TABLE.items()
        ),
        *_emulator_http.ROUTES,
    ]
    for method, path, handler, name in routes:
        if method == "GET":
            app.router.add_get(path, handler, name=name)  # HEAD too
        else:
            app.router.add_route(method, path, handler, name=name)
    return app
