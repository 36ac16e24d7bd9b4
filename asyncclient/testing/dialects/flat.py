"""The `flat` dialect: a service that keeps everything at the top level and terse (its every
choice, beside the other dialects': docs/spec-silences.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from asyncclient._values._bounds import digits
from asyncclient.testing._builds import BuildRejected
from asyncclient.testing._errors import ServiceError, Skip
from asyncclient.testing.dialects.base import Check, Dialect

if TYPE_CHECKING:
    from asyncclient.testing._records import BuildRef

__all__ = ["FlatDialect"]

_PROXY_PAGE = """<html>
<head><title>{status} {reason}</title></head>
<body>
<center><h1>{status} {reason}</h1></center>
<hr><center>edge-proxy</center>
</body>
</html>
"""
_REASONS = {429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


class FlatDialect(Dialect):
    name: ClassVar[str] = "flat"
    summary: ClassVar[str] = (
        "flat {code, message} bodies, 403 for bad keys and other projects' ids, 400 for "
        "malformed ids and pinned builds, HTML proxy pages, epoch ms, booleans for results, "
        "captures as [{name, value}], stopped runs end 'stopped'"
    )
    statuses: ClassVar[Mapping[str, tuple[int, str]]] = {
        "no_key": (401, "missing_key"),
        "bad_key": (403, "invalid_key"),
        "capability": (403, "forbidden"),
        "foreign": (403, "forbidden"),
        "malformed_id": (400, "invalid_id"),
        "pinned": (400, "build_in_use"),
        "plan": (402, "payment_required"),
        "invalid": (400, "validation_failed"),
    }
    run_statuses: ClassVar[Mapping[str, str]] = {"cancelled": "stopped"}
    build_statuses: ClassVar[Mapping[str, str]] = {
        "uploading": "processing",
        "ready": "ready",
        "rejected": "failed",
    }

    def timestamp(self, value: float | None) -> Any:
        return None if value is None else round(value * 1000)

    def number(self, field: str, value: Any) -> Any:
        if value is None:
            return None
        if field == "size":
            return str(value)
        text = str(value)
        return int(text) if digits(text) else value

    def abis(self, abis: Sequence[str]) -> Any:
        return ",".join(abis)

    def warnings(self, warnings: Sequence[str]) -> Any:
        return [{"code": "check_warning", "message": text} for text in warnings]

    def requirements(self, checks: Sequence[Check]) -> Any:
        result = {"passed": True, "failed": False}
        return [
            {"requirement": c.title, "result": result.get(c.result), "details": c.reason}
            for c in checks
        ]

    def captures(self, captures: Mapping[str, Any]) -> Any:
        return [{"name": name, "value": value} for name, value in captures.items()]

    def verdict(self, status: str, headline: str) -> Any:
        return {"status": self.run_status(status), "passed": status == "passed"}

    def run_error(self, code: str, message: str) -> Any:
        return message

    def files(self, run_id: str, base: str, names: Sequence[str]) -> dict[str, Any]:
        return {"video": names[0] if names else None, "screenshots": list(names[1:])}

    def run_build(self, build: BuildRef | None) -> dict[str, Any]:
        return {"build": None if build is None else build.id}

    def skipped(self, skip: Skip) -> dict[str, Any]:
        return {"testId": skip.test_id, "reason": skip.reason, "reasonCode": skip.code}

    def error_details(self, exc: ServiceError) -> dict[str, Any]:
        details = super().error_details(exc)
        if isinstance(exc, BuildRejected):
            details.pop("problems", None)
            details.pop("build", None)
            details["unsupported"] = [p.message for p in exc.build.problems]
            details["buildId"] = exc.build.id
        return details

    def error_body(
        self, status: int, code: str, message: str, details: Mapping[str, Any], exc: ServiceError
    ) -> Any:
        if exc.kind in ("rate_limited", "unavailable", "internal"):
            return _PROXY_PAGE.format(status=status, reason=_REASONS.get(status, "Error"))
        if exc.kind == "no_route":
            return f"404 page not found: {message}"
        return {"code": code, "message": message, **details}
