"""asyncclient: asyncio client, CLI and embedded emulator for the Test-Run Service API.
Importing the package is cheap: the session and models load (with aiohttp) on first use."""

import importlib
import logging
from typing import TYPE_CHECKING, Any

from asyncclient._version import __version__
from asyncclient.errors import (
    ApiError,
    AsyncClientError,
    BadRequestError,
    BuildRejectedError,
    ChecksumMismatchError,
    ConflictError,
    EventLoopError,
    LocalFileError,
    NotFoundError,
    NotStartedError,
    PaymentRequiredError,
    PermissionDeniedError,
    RateLimitedError,
    RedirectError,
    ResponseTooLargeError,
    ServerError,
    TransportError,
    UnauthenticatedError,
    UnknownRunsError,
    ValidationError,
    WatchTimeoutError,
)

# A library logs only where the application sends records.
logging.getLogger("asyncclient").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from asyncclient._client._session import AsyncSession
    from asyncclient._local._bodies import PartBody
    from asyncclient.config import load_config
    from asyncclient.models import (
        FINAL_STATUSES,
        Build,
        BuildList,
        Endpoint,
        ProjectRunStart,
        Run,
        RunStart,
        RunStatus,
        SkippedTest,
        StartedRun,
        UploadedPart,
        UploadStart,
    )
    from asyncclient.reruns import Attempts, SuiteResult
    from asyncclient.suite import SuitePolicy, SuiteRun, wait_with_retries
    from asyncclient.upload import UploadItem, UploadResult
    from asyncclient.watch import RunWatcher

# Public name -> its module, imported on first access (PEP 562).
_LAZY = {
    "AsyncSession": "asyncclient._client._session",
    "PartBody": "asyncclient._local._bodies",
    "FINAL_STATUSES": "asyncclient.models",
    "Build": "asyncclient.models",
    "BuildList": "asyncclient.models",
    "Endpoint": "asyncclient.models",
    "ProjectRunStart": "asyncclient.models",
    "Run": "asyncclient.models",
    "RunStart": "asyncclient.models",
    "RunStatus": "asyncclient.models",
    "SkippedTest": "asyncclient.models",
    "StartedRun": "asyncclient.models",
    "UploadStart": "asyncclient.models",
    "UploadedPart": "asyncclient.models",
    "RunWatcher": "asyncclient.watch",
    "UploadItem": "asyncclient.upload",
    "UploadResult": "asyncclient.upload",
    "Attempts": "asyncclient.reruns",
    "SuiteResult": "asyncclient.reruns",
    "wait_with_retries": "asyncclient.suite",
    "SuitePolicy": "asyncclient.suite",
    "SuiteRun": "asyncclient.suite",
    "load_config": "asyncclient.config",
}

__all__ = [
    "FINAL_STATUSES",
    "ApiError",
    "AsyncClientError",
    "AsyncSession",
    "Attempts",
    "BadRequestError",
    "Build",
    "BuildList",
    "BuildRejectedError",
    "ChecksumMismatchError",
    "ConflictError",
    "Endpoint",
    "EventLoopError",
    "LocalFileError",
    "NotFoundError",
    "NotStartedError",
    "PartBody",
    "PaymentRequiredError",
    "PermissionDeniedError",
    "ProjectRunStart",
    "RateLimitedError",
    "RedirectError",
    "ResponseTooLargeError",
    "Run",
    "RunStart",
    "RunStatus",
    "RunWatcher",
    "ServerError",
    "SkippedTest",
    "StartedRun",
    "SuitePolicy",
    "SuiteResult",
    "SuiteRun",
    "TransportError",
    "UnauthenticatedError",
    "UnknownRunsError",
    "UploadItem",
    "UploadResult",
    "UploadStart",
    "UploadedPart",
    "ValidationError",
    "WatchTimeoutError",
    "__version__",
    "load_config",
    "wait_with_retries",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'asyncclient' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
