"""Dialects: the ways a Test-Run Service may fill what the API spec leaves open, on the same
state and rules. Built in: `asyncclient` (the default), `flat` and `enveloped`; one of your own
subclasses `Dialect` (docs/guides/emulator.md)."""

from __future__ import annotations

import importlib
from typing import Any

from asyncclient.testing.dialects.base import Check, Dialect, WireAnswer
from asyncclient.testing.dialects.enveloped import EnvelopedDialect
from asyncclient.testing.dialects.flat import FlatDialect

__all__ = [
    "DIALECTS",
    "Check",
    "Dialect",
    "DialectSpec",
    "EnvelopedDialect",
    "FlatDialect",
    "WireAnswer",
    "get_dialect",
]

#: The built-in dialects by name, the default first.
DIALECTS: dict[str, type[Dialect]] = {
    cls.name: cls for cls in (Dialect, FlatDialect, EnvelopedDialect)
}
"""The built-in dialects by name, the default (`asyncclient`) first, then `flat` and
`enveloped`."""

DialectSpec = str | Dialect | type[Dialect] | None


def get_dialect(spec: DialectSpec) -> Dialect:
    """A Dialect from a built-in name, `package.module:ClassName`, a Dialect subclass or an
    instance (None is the default). Raises ValueError naming the choices for anything else.

    Args:
        spec: None, "asyncclient", "flat", "enveloped", "package.module:ClassName", a
            `Dialect` subclass or an instance.

    Returns:
        A `Dialect` instance.

    Raises:
        ValueError: Anything else, naming the choices.
    """
    if spec is None:
        return Dialect()
    if isinstance(spec, Dialect):
        return spec
    if isinstance(spec, type) and issubclass(spec, Dialect):
        return spec()
    if isinstance(spec, str):
        name = spec.strip()
        if name in DIALECTS:
            return DIALECTS[name]()
        if ":" in name:
            return _import(name)
    choices = ", ".join(DIALECTS)
    raise ValueError(
        f"unknown dialect {spec!r}: use one of {choices}, or package.module:ClassName "
        "for a Dialect subclass of your own"
    )


def _import(spec: str) -> Dialect:
    module_name, _, attr = spec.partition(":")
    try:
        value: Any = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load the dialect {spec!r}: {exc}") from None
    if isinstance(value, Dialect):
        return value
    if isinstance(value, type) and issubclass(value, Dialect):
        return value()
    raise ValueError(f"{spec!r} is not a Dialect subclass or instance")
