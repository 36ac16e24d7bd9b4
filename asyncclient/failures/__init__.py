"""Why runs failed, grouped by cause: `signature(run)` makes a failure general (ids, numbers,
times, quoted values and URLs become placeholders), `cluster(runs)` groups the runs that failed
the same way, the largest group first.

    from asyncclient.failures import cluster
    for found in cluster(runs):
        print(found.count, found.tests, found.signature)
"""

from asyncclient.failures._signature import (
    MAX_PART,
    SIGNATURE_LIMIT,
    Cluster,
    cluster,
    general,
    signature,
)

__all__ = ["MAX_PART", "SIGNATURE_LIMIT", "Cluster", "cluster", "general", "signature"]
