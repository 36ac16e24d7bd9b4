"""The defaults the library, the command and the tool server share, each defined once; a leaf
with no imports, so the command's `--help` shows the library's number without loading it. The
public names (`asyncclient.watch.DEFAULT_INTERVAL`, ...) are these values; a test holds the
literals in the public signatures equal to them.
"""

from typing import Final

__all__ = [
    "ADAPTIVE_START",
    "DOWNLOAD_CONCURRENCY",
    "INTERVAL",
    "MAX_INTERVAL",
    "MAX_PARTS_IN_FLIGHT",
    "MAX_RESPONSE_BYTES",
    "MAX_RETRIES",
    "REQUEST_TIMEOUT",
    "RETRY_DEADLINE",
    "UPLOAD_CONCURRENCY",
    "WATCH_CONCURRENCY",
]

REQUEST_TIMEOUT: Final = 30.0
"""Seconds one request may take (a part or a download: how long no data may move)."""
MAX_RETRIES: Final = 4
"""Retries of a failed request after the first attempt."""
RETRY_DEADLINE: Final = 30.0
"""Seconds a request rides out an outage of the service, retrying."""
MAX_RESPONSE_BYTES: Final = 32 << 20
"""The largest answer read into memory (32 MiB)."""

INTERVAL: Final = 3.0
"""Seconds between sweeps of a watch while runs keep changing (before jitter)."""
MAX_INTERVAL: Final = 30.0
"""The longest pause between sweeps, reached while nothing changes."""
WATCH_CONCURRENCY: Final = 8
"""List runs requests of one sweep in flight at once (10,000 runs are 200 requests)."""
UPLOAD_CONCURRENCY: Final = 4
ADAPTIVE_START: Final = 2
"""Parts in flight the adaptive default starts at (see asyncclient.upload._adaptive.START)."""
"""Parts in flight as an upload starts; then the number is found while uploading."""
MAX_PARTS_IN_FLIGHT: Final = 16
"""Parts in flight across all the builds of one upload when only a per-build number is fixed."""
DOWNLOAD_CONCURRENCY: Final = 4
"""Files of one run downloaded at once by `asyncclient download`."""
