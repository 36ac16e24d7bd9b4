"""How well clusters agree with labels a person gave the same failures: purity and Hubert and
Arabie's adjusted Rand index (the tests' and benchmarks' measure of `cluster`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

__all__ = ["adjusted_rand_index", "purity"]


def _pairs(n: int) -> float:
    return n * (n - 1) / 2


def adjusted_rand_index(labels: Sequence[Hashable], clusters: Sequence[Hashable]) -> float:
    """1.0 when the clusters are the labels' groups, about 0.0 for a chance grouping, below 0
    for a worse one.

    Args:
        labels: Each item's label.
        clusters: Each item's cluster, in the same order.
    """
    table = Counter(zip(labels, clusters, strict=True))
    index = sum(_pairs(n) for n in table.values())
    rows = sum(_pairs(n) for n in Counter(labels).values())
    cols = sum(_pairs(n) for n in Counter(clusters).values())
    expected = rows * cols / _pairs(len(labels)) if len(labels) > 1 else 0.0
    most = (rows + cols) / 2
    return 1.0 if most == expected else (index - expected) / (most - expected)


def purity(labels: Sequence[Hashable], clusters: Sequence[Hashable]) -> float:
    """The share of items whose cluster's most common label is their own (1.0 for singletons
    too: hence the adjusted Rand index beside it).

    Args:
        labels: Each item's label.
        clusters: Each item's cluster, in the same order.
    """
    by_cluster: dict[Hashable, Counter[Hashable]] = {}
    for label, found in zip(labels, clusters, strict=True):
        by_cluster.setdefault(found, Counter())[label] += 1
    return sum(c.most_common(1)[0][1] for c in by_cluster.values()) / max(1, len(labels))
