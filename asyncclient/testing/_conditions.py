"""Network conditions and faults of the emulator: latency, bandwidth, errors, 429s and drops.

Pure decisions (no aiohttp): the app asks `FaultPlan.decide` what to do with each request.
"""

import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from asyncclient._core._operations import OPERATIONS as _OPERATION_TABLE

__all__ = [
    "FAULT_KINDS",
    "OPERATIONS",
    "Decision",
    "Fault",
    "FaultPlan",
    "NetworkConditions",
]

#: The API's operation names, as faults name them.
OPERATIONS = frozenset(_OPERATION_TABLE)
"""The names of the API's operations, which faults and conditions name (`list_runs`, ...)."""

FAULT_KINDS = ("500", "503", "429", "drop", "drop_after", "500_after")
"""The faults inject() takes: an error answer (500, 503, 429), a cut connection (drop), or one
cut (drop_after) or answered 500 (500_after) after the work was done."""
_BEFORE_KINDS = frozenset({"500", "503", "429", "drop"})


def _rate(name: str) -> Callable[[Any, Any, float], None]:
    def check(_instance: Any, _attribute: Any, value: float) -> None:
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be between 0 and 1, got {value!r}")

    return check


def _optional_ops(value: Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    ops = frozenset(op.strip() for op in value if op.strip())
    unknown = sorted(ops - OPERATIONS)
    if unknown:
        raise ValueError(f"unknown operation(s) {', '.join(unknown)}; known: {sorted(OPERATIONS)}")
    return ops


def _whole_seconds(value: float) -> int:
    """Retry-After is whole seconds: a fraction rounds up."""
    return math.ceil(value)


def _optional_whole_seconds(value: float | None) -> int | None:
    return None if value is None else math.ceil(value)


def _optional_bytes(value: float | None) -> int | None:
    return None if value is None else int(value)


def _non_negative(_instance: Any, attribute: Any, value: float | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value!r}")


def _positive_or_none(_instance: Any, attribute: Any, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen(kw_only=True)
class NetworkConditions:
    """How the network between client and emulator misbehaves. All off by default.

    The random faults (`error_rate`, `rate_limit_rate`, `drop_rate`) draw from one RNG seeded with
    `seed`, so the same sequence of requests meets the same faults.

    Attributes:
        latency_ms: Milliseconds added before every API request.
        part_bandwidth: Bytes per second each part upload is read at (None: no cap).
        link_bandwidth: Bytes per second every upload together is read at (None: no cap): one
            link all the connections share, beside each one's `part_bandwidth`.
        error_rate: The fraction answered 500 or 503.
        rate_limit_rate: The fraction answered 429 with `Retry-After`.
        drop_rate: The fraction whose connection is cut mid-body.
        retry_after: The seconds in `Retry-After`.
        ops: The operations the random faults apply to (empty: all).
        rate_limit_per_key: A token bucket of N requests per second per key (None: off).
        seed: The seed of the fault dice.
    """

    latency_ms: float = attrs.field(default=0.0, validator=_non_negative)
    part_bandwidth: int | None = attrs.field(
        default=None, converter=_optional_bytes, validator=_positive_or_none
    )
    link_bandwidth: int | None = attrs.field(
        default=None, converter=_optional_bytes, validator=_positive_or_none
    )
    error_rate: float = attrs.field(default=0.0, validator=_rate("error_rate"))
    rate_limit_rate: float = attrs.field(default=0.0, validator=_rate("rate_limit_rate"))
    drop_rate: float = attrs.field(default=0.0, validator=_rate("drop_rate"))
    retry_after: int = attrs.field(default=1, converter=_whole_seconds, validator=_non_negative)
    ops: frozenset[str] | None = attrs.field(default=None, converter=_optional_ops)
    rate_limit_per_key: float | None = attrs.field(default=None, validator=_positive_or_none)
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        total = self.error_rate + self.rate_limit_rate + self.drop_rate
        if total > 1.0:
            raise ValueError(f"error_rate + rate_limit_rate + drop_rate must be <= 1, got {total}")

    @property
    def random_faults(self) -> bool:
        """Whether any random fault (errors, rate limits, drops) is on."""
        return self.error_rate + self.rate_limit_rate + self.drop_rate > 0

    def to_json(self) -> dict[str, Any]:
        """The conditions as a JSON object (what `serve --json` and /_emulator/stats show)."""
        return {
            "latencyMs": self.latency_ms,
            "partBandwidth": self.part_bandwidth,
            "linkBandwidth": self.link_bandwidth,
            "errorRate": self.error_rate,
            "rateLimitRate": self.rate_limit_rate,
            "dropRate": self.drop_rate,
            "retryAfter": self.retry_after,
            "ops": None if self.ops is None else sorted(self.ops),
            "rateLimitPerKey": self.rate_limit_per_key,
            "seed": self.seed,
        }

    @classmethod
    def from_json(cls, data: Any) -> "NetworkConditions":
        """The inverse of `to_json`; missing fields take their defaults. Raises ValueError.

        Args:
            data: The JSON object that `to_json` gives.

        Returns:
            The conditions.

        Raises:
            ValueError: A field of the wrong type or range.
        """
        if not isinstance(data, dict):
            raise ValueError("conditions must be a JSON object")
        names = {
            "latencyMs": "latency_ms",
            "partBandwidth": "part_bandwidth",
            "linkBandwidth": "link_bandwidth",
            "errorRate": "error_rate",
            "rateLimitRate": "rate_limit_rate",
            "dropRate": "drop_rate",
            "retryAfter": "retry_after",
            "ops": "ops",
            "rateLimitPerKey": "rate_limit_per_key",
            "seed": "seed",
        }
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"unknown condition(s) {', '.join(unknown)}")
        kwargs: dict[str, Any] = {}
        for wire, name in names.items():
            value = data.get(wire)
            if value is None:
                continue
            if name == "ops":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValueError("ops must be a list of operation names")
            elif isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{wire} must be a number")
            elif name == "seed" and value != int(value):
                raise ValueError(f"{wire} must be a whole number")
            kwargs[name] = value
        return cls(**kwargs)


def _fault_kind(_instance: Any, _attribute: Any, value: str) -> None:
    if value not in FAULT_KINDS:
        raise ValueError(f"fault kind must be one of {', '.join(FAULT_KINDS)}, got {value!r}")


def _at_least_one(_instance: Any, _attribute: Any, value: int) -> None:
    if value < 1:
        raise ValueError(f"times must be at least 1, got {value!r}")


@attrs.frozen
class Fault:
    """A deterministic fault for the next `times` requests of one operation.

    kind: "500", "503", "429" (with Retry-After `retry_after`, default 1), "drop" (connection
    dropped mid-body, before the work is done), "drop_after" (work done, then the connection is
    dropped before the answer), "500_after" (work done, then 500).

    Attributes:
        kind: "500", "503", "429", "drop", "drop_after" or "500_after".
        times: How many requests of the operation meet it.
        retry_after: The `Retry-After` seconds of a 429 or 503.
    """

    kind: str = attrs.field(validator=_fault_kind)
    times: int = attrs.field(default=1, validator=_at_least_one)
    retry_after: int | None = attrs.field(
        default=None, converter=_optional_whole_seconds, validator=_non_negative
    )


@attrs.frozen
class Decision:
    """What to do with one request.

    before: None, "500", "503", "429" or "drop" (instead of the work); after: None, "drop_after" or
    "500_after" (once the work is done).
    """

    latency: float = 0.0
    before: str | None = None
    after: str | None = None
    retry_after: int = 1


_PASS = Decision()


class Link:
    """The one link every upload shares (`link_bandwidth`): each body's bytes, as they are read,
    reserve the link's time in turn, and the reader waits until its bytes would have crossed.
    The rate is read at each reservation, so a link whose capacity changes takes the new one
    at once."""

    def __init__(
        self, rate: Callable[[], int | None], monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate
        self._monotonic = monotonic
        self._free_at = 0.0
        self.bytes = 0  # read through the link since the start

    def take(self, size: int) -> float:
        """Reserve the link for `size` bytes just read; the seconds the reader must wait for
        them to have crossed (0.0 without a cap)."""
        rate = self._rate()
        if rate is None or size <= 0:
            return 0.0
        now = self._monotonic()
        self._free_at = max(self._free_at, now) + size / rate
        self.bytes += size
        return self._free_at - now


class FaultPlan:
    """Holds the conditions, the injected faults, the per-key rate-limit buckets and the link
    every upload shares."""

    def __init__(
        self,
        conditions: NetworkConditions | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._monotonic = monotonic
        self.link = Link(lambda: self._conditions.link_bandwidth, monotonic)
        self._injected: dict[str, deque[list[Any]]] = {}
        self._buckets: dict[str, tuple[float, float]] = {}
        self.conditions = conditions or NetworkConditions()

    @property
    def conditions(self) -> NetworkConditions:
        return self._conditions

    @conditions.setter
    def conditions(self, value: NetworkConditions) -> None:
        self._conditions = value
        self._rng = random.Random(value.seed)
        self._buckets.clear()
        self._update_active()

    def inject(self, op: str, fault: Fault) -> None:
        if op not in OPERATIONS:
            raise ValueError(f"unknown operation {op!r}; known: {sorted(OPERATIONS)}")
        self._injected.setdefault(op, deque()).append([fault, fault.times])
        self._update_active()

    def clear_faults(self) -> None:
        self._injected.clear()
        self._update_active()

    def pending(self, op: str) -> int:
        """How many requests of `op` the injected faults still affect."""
        return sum(remaining for _fault, remaining in self._injected.get(op, ()))

    def _update_active(self) -> None:
        c = self._conditions
        self.active = bool(
            self._injected or c.latency_ms or c.random_faults or c.rate_limit_per_key is not None
        )

    def decide(self, op: str, key: str | None) -> Decision:
        """The fate of one request of `op` made with API key `key` (None when it has none)."""
        if not self.active:
            return _PASS
        c = self._conditions
        latency = c.latency_ms / 1000.0
        queue = self._injected.get(op)
        if queue:
            entry = queue[0]
            fault: Fault = entry[0]
            entry[1] -= 1
            if entry[1] <= 0:
                queue.popleft()
                if not queue:
                    del self._injected[op]
                    self._update_active()
            retry = c.retry_after if fault.retry_after is None else fault.retry_after
            if fault.kind in _BEFORE_KINDS:
                return Decision(latency, before=fault.kind, retry_after=retry)
            return Decision(latency, after=fault.kind, retry_after=retry)
        if c.rate_limit_per_key is not None and key is not None:
            wait = self._take_token(key, c.rate_limit_per_key)
            if wait > 0:
                return Decision(latency, before="429", retry_after=max(1, math.ceil(wait)))
        if c.random_faults and (c.ops is None or op in c.ops):
            draw = self._rng.random()
            if draw < c.error_rate:
                kind = "500" if self._rng.random() < 0.5 else "503"
                return Decision(latency, before=kind, retry_after=c.retry_after)
            draw -= c.error_rate
            if draw < c.rate_limit_rate:
                return Decision(latency, before="429", retry_after=c.retry_after)
            draw -= c.rate_limit_rate
            if draw < c.drop_rate:
                return Decision(latency, before="drop", retry_after=c.retry_after)
        if latency:
            return Decision(latency)
        return _PASS

    def _take_token(self, key: str, rate: float) -> float:
        """Token bucket of `rate` requests per second (burst `rate`): 0, or seconds to wait."""
        now = self._monotonic()
        capacity = max(1.0, rate)
        tokens, then = self._buckets.get(key, (capacity, now))
        tokens = min(capacity, tokens + (now - then) * rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / rate
