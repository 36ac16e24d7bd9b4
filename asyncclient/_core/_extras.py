"""The optional parts: which extra brings which package, and the one check that names the
`pip install 'asyncclient[...]'` to run when a feature's part is missing (the core install,
`pip install asyncclient`, has the library alone).

    require("--html", "cli", "jinja2")     # MissingExtraError (an ImportError) when absent
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Final

from asyncclient.errors import MissingExtraError

__all__ = ["EXTRAS", "require"]

EXTRAS: Final[Mapping[str, tuple[str, ...]]] = {
    # The command: display (rich), HTML report (jinja2), quarantine writer.
    "cli": ("rich", "jinja2", "tomlkit", "re2"),
    # A failure category's regex, matched by RE2 in linear time.
    "regex": ("re2",),
    # The emulator's TLS: a throwaway CA and loopback certificates (serve --tls).
    "tls": ("trustme",),
    "mcp": ("mcp",),
    "otel": ("opentelemetry",),
}
"""Each extra and the importable packages it brings (pyproject.toml's optional dependencies)."""


def require(feature: str, extra: str, *packages: str) -> None:
    """Raise MissingExtraError naming `extra` when one of `packages` (default: all the
    extra's) cannot be imported. Each is imported here, as the feature is about to: a package
    that is there but broken fails as an ImportError too, with the same one line."""
    for package in packages or EXTRAS[extra]:
        try:
            importlib.import_module(package)
        except ImportError:
            raise MissingExtraError(feature, extra, package) from None
