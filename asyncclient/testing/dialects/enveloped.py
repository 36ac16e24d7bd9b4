"""The `enveloped` dialect: a service that wraps things in objects and shouts its build statuses
(its every choice, beside the other dialects': docs/spec-silences.md)."""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from asyncclient._values._bounds import digits
from asyncclient.testing._builds import BuildRejected
from asyncclient.testing._errors import ServiceError, Skip
from asyncclient.testing.dialects.base import Check, Dialect

if TYPE_CHECKING:
    from asyncclient.testing._records import BuildRef

__all__ = ["EnvelopedDialect"]

_RESULT_WORDS = {"passed": "pass", "failed": "fail", "skipped": "skip"}
_VERDICTS = {
    "passed": "PASS",
    "failed": "FAIL",
    "blocked": "BLOCKED",
    "inconclusive": "UNKNOWN",
    "error": "ERROR",
    "cancelled": "CANCELED",
}
_CONTENT_TYPES = {".mp4": "video/mp4", ".png": "image/png", ".jpg": "image/jpeg"}


class EnvelopedDialect(Dialect):
    name: ClassVar[str] = "enveloped"
    summary: ClassVar[str] = (
        '{"errors": [...]} bodies, {"error": "text"} for bad keys, 400 for malformed ids, '
        "422 for pinned builds, text and empty bodies for faults, ISO 8601 with offsets, "
        "upper-case build statuses, stopped runs end 'canceled', requirements wrapped in "
        "{checks}, files as objects"
    )
    statuses: ClassVar[Mapping[str, tuple[int, str]]] = {
        "no_key": (401, "unauthorized"),
        "bad_key": (401, "unauthorized"),
        "capability": (403, "insufficient_scope"),
        "malformed_id": (400, "bad_request"),
        "pinned": (422, "unprocessable_entity"),
        "plan": (402, "plan_required"),
        "invalid": (422, "validation_error"),
    }
    run_statuses: ClassVar[Mapping[str, str]] = {"cancelled": "canceled"}
    build_statuses: ClassVar[Mapping[str, str]] = {
        "uploading": "UPLOADING",
        "ready": "READY",
        "rejected": "REJECTED",
    }

    def timestamp(self, value: float | None) -> Any:
        if value is None:
            return None
        return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(int(value)))

    def number(self, field: str, value: Any) -> Any:
        if field == "versionCode" and isinstance(value, str) and digits(value):
            return int(value)
        return value

    def warnings(self, warnings: Sequence[str]) -> Any:
        return [{"text": text, "level": "warning"} for text in warnings]

    def requirements(self, checks: Sequence[Check]) -> Any:
        return {
            "total": len(checks),
            "checks": [
                {
                    "name": c.title,
                    "status": _RESULT_WORDS.get(c.result, c.result),
                    "message": c.reason,
                }
                for c in checks
            ],
        }

    def captures(self, captures: Mapping[str, Any]) -> Any:
        return {name: {"value": value} for name, value in captures.items()}

    def verdict(self, status: str, headline: str) -> Any:
        return _VERDICTS.get(status, status.upper())

    def headline(self, text: str) -> Any:
        return {"text": text, "format": "plain"}

    def run_error(self, code: str, message: str) -> Any:
        return {"type": code, "detail": message}

    def files(self, run_id: str, base: str, names: Sequence[str]) -> dict[str, Any]:
        def ref(name: str) -> dict[str, str]:
            suffix = name[name.rfind(".") :]
            return {
                "url": f"{base}/api/v1/runs/{run_id}/files/{name}",
                "contentType": _CONTENT_TYPES.get(suffix, "application/octet-stream"),
            }

        return {
            "video": ref(names[0]) if names else None,
            "screenshots": [ref(name) for name in names[1:]],
        }

    def run_build(self, build: BuildRef | None) -> dict[str, Any]:
        if build is None:
            return {"build": None}
        return {
            "build": {
                "id": build.id,
                "appId": build.app_id,
                "version": build.version,
                "versionCode": self.number("versionCode", build.version_code),
            }
        }

    def skipped(self, skip: Skip) -> dict[str, Any]:
        return {"testId": skip.test_id, "reason": {"code": skip.code, "message": skip.reason}}

    def error_details(self, exc: ServiceError) -> dict[str, Any]:
        details = super().error_details(exc)
        if isinstance(exc, BuildRejected):
            details.pop("problems", None)
            details["cannotRun"] = [
                {
                    "type": p.kind,
                    "actual": list(p.found),
                    "expected": list(p.supported),
                    "reason": p.message,
                }
                for p in exc.build.problems
            ]
        return details

    def error_body(
        self, status: int, code: str, message: str, details: Mapping[str, Any], exc: ServiceError
    ) -> Any:
        if exc.kind in ("no_key", "bad_key"):
            return {"error": f"Unauthorized: {message}"}
        if exc.kind == "unavailable":
            return "Service Unavailable\n"
        if exc.kind == "internal":
            return None
        if exc.kind == "no_route":
            return (
                "<!DOCTYPE html><html><head><title>Not Found</title></head>"
                f"<body><h1>Not Found</h1><p>{html.escape(message)}</p></body></html>"
            )
        meta = dict(details)
        lists = {k: meta.pop(k) for k in ("started", "skipped") if k in meta}
        error: dict[str, Any] = {
            "code": code,
            "title": message,
            "detail": message,
            "status": str(status),
        }
        if meta:
            error["meta"] = meta
        return {"errors": [error], **lists}
