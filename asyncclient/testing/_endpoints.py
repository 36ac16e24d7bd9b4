"""Tester endpoints: the calls a project's tests may make, and the rules of adding and deleting.

No HTTP here: `_endpoints_http` parses each request and calls the `EndpointStore` (via `Backend`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from asyncclient.testing._auth import ApiKey
from asyncclient.testing._errors import ServiceError, lookup_error
from asyncclient.testing._records import Endpoint
from asyncclient.testing._seed import SeedEndpoint
from asyncclient.testing._state import SharedState

__all__ = ["EndpointStore"]


class EndpointStore:
    """Every tester endpoint of the service, by id."""

    def __init__(self, state: SharedState) -> None:
        self._state = state
        self.endpoints: dict[str, Endpoint] = {}

    def add_seeded(self, seeded: Iterable[SeedEndpoint], at: float) -> None:
        for seeded_endpoint in seeded:
            endpoint = Endpoint(
                clock=self._state.clock,
                id=seeded_endpoint.id or self._state.new_id("ep_", self.endpoints),
                project_id=seeded_endpoint.project,
                name=seeded_endpoint.name,
                description=seeded_endpoint.description,
                method=seeded_endpoint.method,
                url=seeded_endpoint.url,
                headers=dict(seeded_endpoint.headers),
                body_template=seeded_endpoint.body_template,
                created_at=at,
            )
            self.endpoints[endpoint.id] = endpoint
            self._state.projects[endpoint.project_id].endpoints.append(endpoint)

    def list_endpoints(self, key: ApiKey, project_id: str) -> list[Endpoint]:
        return list(self._state.project(key, project_id).endpoints)

    def add_endpoint(
        self,
        key: ApiKey,
        project_id: str,
        *,
        name: str,
        description: str,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body_template: str | None,
    ) -> Endpoint:
        project = self._state.project(key, project_id)
        if any(e.name == name for e in project.endpoints):
            raise ServiceError(
                409, "already_exists", f"{project.id} already has an endpoint named {name}"
            )
        endpoint = Endpoint(
            clock=self._state.clock,
            id=self._state.new_id("ep_", self.endpoints),
            project_id=project.id,
            name=name,
            description=description,
            method=method,
            url=url,
            headers=dict(headers),
            body_template=body_template,
            created_at=self._state.now(),
        )
        self.endpoints[endpoint.id] = endpoint
        project.endpoints.append(endpoint)
        return endpoint

    def delete_endpoint(self, key: ApiKey, endpoint_id: str) -> None:
        endpoint = self.endpoints.get(endpoint_id)
        if endpoint is None or endpoint.project_id not in key.projects:
            raise lookup_error("endpoint", "ep_", endpoint_id, endpoint is not None)
        del self.endpoints[endpoint.id]
        self._state.projects[endpoint.project_id].endpoints.remove(endpoint)
