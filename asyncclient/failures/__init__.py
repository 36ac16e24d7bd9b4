"""Why runs failed, grouped by cause: `signature(run)` makes a failure general (ids, numbers,
times, quoted values and URLs become placeholders), `cluster(runs)` groups the runs that failed
the same way, the largest group first."""

from asyncclient.failures._categories import (
    BUILT_IN,
    CATEGORIES_FILE,
    Categories,
    Category,
    failure_text,
    find_categories,
    load_categories,
    regex_problem,
)
from asyncclient.failures._history import MAX_CLUSTERS, FailureReport, failure_report
from asyncclient.failures._signature import (
    MAX_PART,
    SIGNATURE_LIMIT,
    Cluster,
    cluster,
    general,
    signature,
)

__all__ = [
    "BUILT_IN",
    "CATEGORIES_FILE",
    "MAX_CLUSTERS",
    "MAX_PART",
    "SIGNATURE_LIMIT",
    "Categories",
    "Category",
    "Cluster",
    "FailureReport",
    "cluster",
    "failure_report",
    "failure_text",
    "find_categories",
    "general",
    "load_categories",
    "regex_problem",
    "signature",
]
