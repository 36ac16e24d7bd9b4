"""The one cattrs Converter that turns the service's JSON into asyncclient.models and back.
Wire names (camelCase; snake_case in the endpoint list view) and lenient formats live here."""

import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from asyncclient._values import _bounds as bounds
from asyncclient._values._lenient import start_lists
from asyncclient.models import (
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

__all__ = [
    "converter",
    "parse_timestamp",
    "structure_skipped",
    "structure_started",
    "structure_status",
]

T = TypeVar("T")

# Epoch numbers above this are milliseconds.
_EPOCH_MS_THRESHOLD: Final = 1e11
_KNOWN_STATUSES: Final = {status.value: status for status in RunStatus}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def parse_timestamp(value: Any, _type: Any = None) -> datetime | None:
    """An aware UTC datetime from ISO 8601 text (with "Z" or an offset; none means UTC) or from
    epoch seconds or milliseconds, within `_bounds.EARLIEST`..`_bounds.LATEST`; anything else,
    including null and a time outside that range, is None (unknown)."""
    if type(value) is str:  # the common case, without the calls of the general one
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return bounds.moment(_timestamp(value))
        if parsed.tzinfo is not None and bounds.EARLIEST <= parsed < bounds.LATEST:
            return parsed
    return bounds.moment(_timestamp(value))


def _timestamp(value: Any) -> datetime | None:
    if type(value) is str or isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value) if abs(value) < 1e300 else math.inf
        if not math.isfinite(seconds):
            return None
        if abs(seconds) >= _EPOCH_MS_THRESHOLD:
            seconds /= 1000.0
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    return None


def structure_status(value: Any, _type: Any = None) -> RunStatus | str:
    """A RunStatus for a documented status (in any case), else the status kept as a plain
    string (Run.status_kind reads other words such as `canceled` or `stopped`)."""
    if isinstance(value, str):
        known = _KNOWN_STATUSES.get(value)
        if known is None:
            known = _KNOWN_STATUSES.get(value.strip().lower())
        return value if known is None else known
    return "" if value is None else str(value)


def _lenient_str(value: Any, _type: Any = None) -> str | None:
    # versionCode arrives as a number from some services; minOs too.
    if value is None or type(value) is str or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else str(value)
    return None


def _required_str(value: Any, _type: Any = None) -> str:
    text = _lenient_str(value)
    if text is None:
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return text


def _lenient_int(value: Any, _type: Any = None) -> int | None:
    # Every count, size and millisecond figure: bounded (asyncclient._values._bounds).
    if type(value) is int and 0 <= value <= bounds.MAX_COUNT:
        return value
    return bounds.count(value)


def _required_int(value: Any, _type: Any = None) -> int:
    number = _lenient_int(value)
    if number is None:
        raise ValueError(f"expected a number, got {type(value).__name__}")
    return number


def _lenient_bool(value: Any, _type: Any = None) -> bool | None:
    if value is True or value is False or value is None:
        return value
    # `final` sent as "true"/"false" or 1/0 by some services.
    if isinstance(value, str):
        return {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}.get(
            value.strip().lower()
        )
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    return None


def _str_tuple(value: Any, _type: Any = None) -> tuple[str, ...]:
    if type(value) is list or isinstance(value, list | tuple):
        items = tuple(value)
        for item in items:
            if type(item) is not str:
                return tuple(text for text in map(_lenient_str, items) if text is not None)
        return items
    return ()


def _abis(value: Any, _type: Any = None) -> tuple[str, ...]:
    # A list, or one string of comma-separated names ("arm64-v8a,x86_64").
    if type(value) is list:
        items = tuple(value)
        for item in items:
            if type(item) is not str:
                return _str_tuple(items)
        return items
    if isinstance(value, str):
        return tuple(name for name in (part.strip() for part in value.split(",")) if name)
    return _str_tuple(value)


def _any_tuple(value: Any, _type: Any = None) -> tuple[Any, ...]:
    # Items as sent; a lone value is a list of one.
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(value)
    return (value,)


def _as_is(value: Any, _type: Any = None) -> Any:
    return value


def _register_exact(conv: cattrs.Converter, type_: Any, hook: Callable[[Any, Any], Any]) -> None:
    # Generic aliases such as tuple[str, ...] cannot go through singledispatch.
    conv.register_structure_hook_func(lambda candidate: candidate == type_, hook)


# Values each hook returns unchanged: tested inline.
_AS_IS: Final[dict[Any, str]] = {
    _lenient_str: "v is None or type(v) is str",
    _required_str: "type(v) is str",
    _lenient_int: f"type(v) is int and 0 <= v <= {bounds.MAX_COUNT}",
    _as_is: "True",
}
# Values a hook changes, where an expression does the same.
_INLINE: Final[dict[Any, tuple[str, str]]] = {
    _any_tuple: ("type(v) is list", "tuple(v)"),
}


def _read(hook: Any, call: str) -> str:
    """The expression that gives what `call` (the hook on `v`) gives, inline where it can."""
    if hook in _INLINE:
        test, expression = _INLINE[hook]
        return f"{expression} if {test} else {call}"
    passes = _AS_IS.get(hook)
    if passes is None:
        return call
    return "v" if passes == "True" else f"v if {passes} else {call}"


def _structure_fn(
    cls: type[Any], conv: cattrs.Converter, hooks: Mapping[str, Callable[[Any, Any], Any]]
) -> Callable[[Mapping[str, Any], Any], Any]:
    """cls from its camelCase object: what cattrs' make_dict_structure_fn makes (a missing key
    leaves the field's default, a missing required key is a KeyError, other keys are ignored),
    with a value that its hook would keep as it is not passed through the hook."""
    attrs.resolve_types(cls)
    names: dict[str, Any] = {"__cls": cls, "__missing": attrs.NOTHING}
    lines = [f"def structure_{cls.__name__}(o, _=None):", "    get = o.get"]
    args: list[str] = []
    keywords: list[str] = []
    for index, field in enumerate(attrs.fields(cls)):
        if not field.init:
            continue
        hook = hooks.get(field.name) or conv.get_structure_hook(field.type)
        names[f"__h{index}"], names[f"__t{index}"] = hook, field.type
        key, value = repr(camel(field.name)), f"__a{index}"
        convert = f"{value} = {_read(hook, f'__h{index}(v, __t{index})')}"
        if field.default is attrs.NOTHING:
            lines += [f"    v = o[{key}]", f"    {convert}"]
        else:
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                names[f"__d{index}"] = default.factory
                fallback = f"__d{index}()"
            else:
                names[f"__d{index}"] = default
                fallback = f"__d{index}"
            lines += [
                f"    v = get({key}, __missing)",
                "    if v is __missing:",
                f"        {value} = {fallback}",
                "    else:",
                f"        {convert}",
            ]
        if field.kw_only:
            keywords.append(f"{field.name}={value}")
        else:
            args.append(value)
    lines.append(f"    return __cls({', '.join(args + keywords)})")
    exec(compile("\n".join(lines), f"<asyncclient structure {cls.__name__}>", "exec"), names)
    structure: Callable[[Mapping[str, Any], Any], Any] = names[f"structure_{cls.__name__}"]
    return structure


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(detailed_validation=False, forbid_extra_keys=False)
    conv.register_structure_hook(datetime | None, parse_timestamp)
    conv.register_structure_hook(RunStatus | str, structure_status)
    conv.register_structure_hook(str | None, _lenient_str)
    conv.register_structure_hook(str, _required_str)
    conv.register_structure_hook(int | None, _lenient_int)
    conv.register_structure_hook(int, _required_int)
    conv.register_structure_hook(bool | None, _lenient_bool)
    _register_exact(conv, tuple[str, ...], _str_tuple)

    def tolerant_tuple(item: type[Any]) -> Callable[[Any, Any], tuple[Any, ...]]:
        item_hook = conv.get_structure_hook(item)

        def hook(value: Any, _type: Any) -> tuple[Any, ...]:
            if not isinstance(value, list | tuple):
                return ()
            return tuple(item_hook(element, item) for element in value)

        return hook

    # Build fields the API spec leaves open: never refused, never dropped.
    open_fields: dict[type, dict[str, Callable[[Any, Any], Any]]] = {
        Build: {"status": _as_is, "abis": _abis, "warnings": _any_tuple},
        RunStart: {"overage": _as_is},
    }
    camel_case = (Build, BuildList, UploadStart, UploadedPart, RunStart, StartedRun, SkippedTest)
    for cls in (*camel_case, Run, ProjectRunStart):
        renames: dict[str, Any] = {
            field.name: override(rename=camel(field.name)) for field in attrs.fields(cls)
        }
        hooks = open_fields.get(cls, {})
        conv.register_structure_hook(cls, _structure_fn(cls, conv, hooks))
        conv.register_unstructure_hook(cls, make_dict_unstructure_fn(cls, conv, **renames))
        _register_exact(conv, tuple[cls, ...], tolerant_tuple(cls))  # type: ignore[valid-type]

    # run_project's lists, read leniently (_lenient.start_lists).
    def project_run_start(value: Any, _type: Any) -> ProjectRunStart:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected an object, got {type(value).__name__}")
        started, skipped = start_lists(value)
        return ProjectRunStart(_each(started, StartedRun, conv), _each(skipped, SkippedTest, conv))

    conv.register_structure_hook(ProjectRunStart, project_run_start)
    # The endpoint list view is snake_case, per the spec.
    conv.register_structure_hook(Endpoint, make_dict_structure_fn(Endpoint, conv))
    conv.register_unstructure_hook(Endpoint, make_dict_unstructure_fn(Endpoint, conv))
    return conv


converter: Final = _make_converter()


def structure_hook(cls: type[T]) -> Callable[[Any], T]:
    """A one-argument structuring function for cls, compiled once (for the hot path)."""
    hook = converter.get_structure_hook(cls)

    def structure(value: Any) -> T:
        if type(value) is not dict and not isinstance(value, Mapping):
            raise TypeError(f"expected an object for {cls.__name__}, got {type(value).__name__}")
        result: T = hook(value, cls)
        return result

    return structure


def structure_list(cls: type[T], value: Any) -> list[T]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list of {cls.__name__}, got {type(value).__name__}")
    hook = structure_hook(cls)
    return [hook(element) for element in value]


def structure_started(items: Any) -> tuple[StartedRun, ...]:
    """StartedRun values from a started list; an item that cannot be read is left out."""
    return _each(items, StartedRun, converter)


def structure_skipped(items: Any) -> tuple[SkippedTest, ...]:
    """SkippedTest values from a skipped list already rewritten by _lenient.start_lists."""
    return _each(items, SkippedTest, converter)


def _each(items: Any, cls: type[T], conv: cattrs.Converter) -> tuple[T, ...]:
    hook = conv.get_structure_hook(cls)
    out = []
    for item in items if isinstance(items, list | tuple) else ():
        try:
            out.append(hook(item, cls))
        except (KeyError, TypeError, ValueError):
            continue
    return tuple(out)
