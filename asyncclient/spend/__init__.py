"""Device time spent where it tells something: reuse a pass on an identical build (`reuse`),
catch a new test that is flaky on arrival (`arrival`), and prove a quarantined test fixed
before lifting it (`verify`); the command, the tool server and users' code share them."""

from asyncclient.spend.arrival import (
    BUDGET_SECONDS,
    MAX_NEW_TEST_RUNS,
    new_tests,
    read_new_tests,
    repeats_for,
)
from asyncclient.spend.reuse import Reuse, Started, find_reusable, stop_reused
from asyncclient.spend.verify import FixCheck, failure_rate_bound, verify_fix

__all__ = [
    "BUDGET_SECONDS",
    "MAX_NEW_TEST_RUNS",
    "FixCheck",
    "Reuse",
    "Started",
    "failure_rate_bound",
    "find_reusable",
    "new_tests",
    "read_new_tests",
    "repeats_for",
    "stop_reused",
    "verify_fix",
]
