"""A suite job's figures as OpenTelemetry metrics (INSTRUMENTS: device and re-run seconds,
queue waits, runs, tests, failed and flaky tests per job, jobs and their duration), with
low-cardinality attributes only: the project, the pipeline's name, the run's kind, mode and
outcome, the test's verdict and quarantine, the job's status; never an id or a commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from asyncclient._client import _telemetry

if TYPE_CHECKING:
    from asyncclient._reports.model import SuiteReport

__all__ = ["INSTRUMENTS", "MODES", "JobMeters", "job_meters", "record_job"]

MODES: Final = ("auto", "cold", "warm")  # the API's modes: a bounded set of values


# Each instrument: its attribute here, counter or histogram, name, unit, description.
INSTRUMENTS: Final = (
    ("device", "counter", "asyncclient.device.time", "s", "Device seconds the runs took."),
    ("rerun_device", "counter", "asyncclient.rerun.device.time", "s",
     "Device seconds of re-runs, copies and new tests' repeats."),
    ("queue", "histogram", "asyncclient.run.queue.duration", "s",
     "Seconds a run waited for a device."),
    ("runs", "counter", "asyncclient.runs", "{run}", "Runs that ended."),
    ("tests", "counter", "asyncclient.tests", "{test}", "Tests by their verdict."),
    ("failed", "histogram", "asyncclient.job.failed_tests", "{test}",
     "Tests that did not pass, one value per job."),
    ("flaky", "histogram", "asyncclient.job.flaky_tests", "{test}",
     "Tests that were flaky, one value per job."),
    ("jobs", "counter", "asyncclient.jobs", "{job}", "Jobs by their outcome."),
    ("duration", "histogram", "asyncclient.job.duration", "s", "How long a job took."),
)  # fmt: skip


class JobMeters:
    """The job's instruments (INSTRUMENTS), made once per meter provider."""

    device: Any
    rerun_device: Any
    queue: Any
    runs: Any
    tests: Any
    failed: Any
    flaky: Any
    jobs: Any
    duration: Any

    def __init__(self, meter: Any) -> None:
        for attribute, kind, name, unit, description in INSTRUMENTS:
            make = meter.create_counter if kind == "counter" else meter.create_histogram
            setattr(self, attribute, make(name, unit=unit, description=description))


def job_meters() -> JobMeters | None:
    """The job's instruments of the global meter provider, or None while no SDK is set up."""
    return _telemetry.made_for_meters(JobMeters)


def record_job(
    meters: JobMeters,
    report: SuiteReport | None,
    status: str,
    seconds: float,
    common: Mapping[str, str],
) -> None:
    """One job's points: `common` (the project, the pipeline's name) on each; without a
    report (the job ended before it), the job's count and duration only."""
    meters.jobs.add(1, {**common, "test.suite.run.status": status})
    meters.duration.record(seconds, {**common, "test.suite.run.status": status})
    if report is None:
        return
    failed = flaky = 0
    for test in report.tests:
        failed += not test.final.passed
        flaky += test.flaky
        meters.tests.add(
            1,
            {
                **common,
                "asyncclient.test.outcome": test.outcome,
                "asyncclient.test.quarantined": test.quarantine is not None,
            },
        )
        for attempt in test.attempts:
            point = {**common, "asyncclient.run.kind": attempt.kind}
            mode = attempt.run.mode
            if mode in MODES:
                point["asyncclient.run.mode"] = mode
            took = attempt.seconds or 0.0
            if attempt.reused is None:
                meters.runs.add(1, {**point, "asyncclient.run.outcome": attempt.outcome})
                if took:
                    meters.device.add(took, point)
                    if attempt.kind != "run":
                        meters.rerun_device.add(took, point)
            if attempt.queue_seconds is not None:
                meters.queue.record(attempt.queue_seconds, point)
    if report.skipped:
        skipped = {**common, "asyncclient.test.outcome": "not_started"}
        meters.tests.add(len(report.skipped), skipped)
    meters.failed.record(failed, common)
    meters.flaky.record(flaky, common)
