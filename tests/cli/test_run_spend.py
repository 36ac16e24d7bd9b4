"""Device time where it tells something (asyncclient.spend), as a CI job meets it: a pass
reused on an identical build (--reuse-passed), a new test repeated and caught flaky on arrival
(--new-test-runs), and a quarantined test's fix proven (`quarantine verify`), each against the
emulator, with the reports that tell these runs apart."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from spend_support import FAST, SPEED, RunCli, env_of, seed, upload

from asyncclient.testing import FakeService
from asyncclient.testing.builders import build_apk


async def test_a_pass_on_an_identical_build_is_reused_and_failures_run_again(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """Job 1 on a build; the same file uploaded again (a new build id, the same sha256); job 2
    with --reuse-passed 7 stops t_pass's new run while it is queued (the emulator holds it
    there, so the order never depends on the machine's speed) and reports it reused from job
    1's run; t_broken runs again and fails. A build with other bytes reuses nothing."""
    apk = build_apk(tmp_path / "shop.apk", package="com.example.shop", version_code=7)
    other = build_apk(tmp_path / "shop-8.apk", package="com.example.shop", version_code=8)
    async with FakeService(seed(), speed=SPEED) as svc:
        env = env_of(svc)
        first_build = await upload(run_cli, svc, apk)
        job1 = await run_cli(
            "run", "project", "p_dt", "--build", first_build, "--wait", "--json", *FAST, env=env
        )
        assert job1.code == 1, job1.stderr
        earlier = {entry["testId"]: entry["id"] for entry in job1.json()}
        again = await upload(run_cli, svc, apk)
        assert again != first_build
        assert svc.backend.builds[again].sha256 == svc.backend.builds[first_build].sha256
        junit, html, ctrf = tmp_path / "r.xml", tmp_path / "r.html", tmp_path / "r.json"
        svc.reset_requests()
        with svc.hold("t_pass"):  # its new run stays queued until reuse stops it
            job2 = await run_cli(
                "run", "project", "p_dt", "--build", again, "--wait", "--json",
                "--reuse-passed", "7", "--junit", str(junit), "--html", str(html),
                "--ctrf", str(ctrf), *FAST, env=env,
            )  # fmt: skip
        entries = {entry["testId"]: entry for entry in job2.json()}
        # One listing per test, read once: the ETA and reuse share it (the failing test's
        # history for the report is the flakiness read, another listing).
        histories = Counter(
            r.query["testId"] for r in svc.requests_for("list_runs") if "testId" in r.query
        )
        reused_run = svc.backend.runs[entries["t_pass"]["id"]]
        broken_run = svc.backend.runs[entries["t_broken"]["id"]]
        third = await upload(run_cli, svc, other)
        job3 = await run_cli(
            "run", "project", "p_dt", "--build", third, "--wait", "--json",
            "--reuse-passed", "7", *FAST, env=env,
        )  # fmt: skip
    assert job2.code == 1, job2.stderr  # t_broken still fails
    assert histories == {"t_pass": 1, "t_broken": 1}
    assert reused_run.stopped_at is not None
    assert reused_run.stopped_at < reused_run.start_at  # stopped in the queue: no device time
    assert broken_run.stopped_at is None
    assert entries["t_broken"]["status"] == "failed"
    passed = entries["t_pass"]
    assert passed["summary"]["outcome"] == "passed"
    assert passed["summary"]["kind"] == "run"
    assert passed["stoppedBy"] == "reuse"
    assert passed["reused"]["earlierRunId"] == earlier["t_pass"]
    assert passed["reused"]["earlierBuildId"] == first_build
    assert passed["reused"]["savedSeconds"] == 20.0
    assert passed["cost"]["reusedRuns"] == 1
    assert passed["cost"]["deviceSeconds"] == 0
    assert "reused" not in entries["t_broken"]
    said = job2.stderr
    assert f"reused t_pass: passed in {earlier['t_pass']} on an identical build" in said
    assert "20.0 s saved by reusing 1 pass" in said
    assert f"{passed['id']}  t_pass  reused" in said  # the progress line, not "cancelled"
    assert "1 reused (passed before on an identical build)" in said
    # JUnit: passed, a property and <system-out> naming the earlier run.
    case = ET.parse(junit).getroot().find("testcase[@classname='t_pass']")
    assert case is not None
    assert case.find("failure") is None
    assert case.find("skipped") is None
    out = case.findtext("system-out") or ""
    assert f"passed in {earlier['t_pass']}" in out
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert props[f"{passed['id']}.reusedFrom"] == earlier["t_pass"]
    assert props["asyncclient.savedSeconds"] == "20.0"
    page = html.read_text()
    assert f"reused: passed in {earlier['t_pass']}" in page
    tests = {t["name"]: t for t in json.loads(ctrf.read_text())["results"]["tests"]}
    assert tests["Passes"]["status"] == "passed"
    assert tests["Passes"]["extra"]["reused"]["earlierRunId"] == earlier["t_pass"]
    # Other bytes: nothing reused, both tests ran.
    assert job3.code == 1, job3.stderr
    assert all("reused" not in entry for entry in job3.json())
    assert "reused" not in job3.stderr


async def test_reuse_never_takes_a_failure_nor_another_mode(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """Only passed runs in the mode asked count: after a cold job, a warm job on the same bytes
    reuses nothing, nor does t_broken (which never passed); an auto job (either mode) reuses
    t_pass. The flat dialect (the run's build an id only) reuses through get_build."""
    apk = build_apk(tmp_path / "shop.apk", package="com.example.shop", version_code=7)
    async with FakeService(seed(), speed=SPEED, dialect="flat") as svc:
        env = env_of(svc)
        build = await upload(run_cli, svc, apk)
        await run_cli(
            "run", "project", "p_dt", "--build", build, "--mode", "cold", "--wait", *FAST, env=env
        )  # fmt: skip
        warm = await run_cli(
            "run", "test", "t_pass", "--build", build, "--mode", "warm", "--wait", "--json",
            "--reuse-passed", "7", *FAST, env=env,
        )  # fmt: skip
        with svc.hold("t_pass"):  # queued until reuse stops it, however slow the machine
            warm_again = await run_cli(
                "run", "project", "p_dt", "--build", build, "--wait", "--json",
                "--reuse-passed", "7", *FAST, env=env,
            )  # fmt: skip
        gets = len(svc.requests_for("get_build"))
    assert all("reused" not in entry for entry in warm.json()), warm.stderr
    reused = {entry["testId"] for entry in warm_again.json() if "reused" in entry}
    assert reused == {"t_pass"}, warm_again.stderr
    assert gets <= 4  # this job's build and the earlier run's, each read once per job


async def test_a_new_test_runs_four_times_and_is_caught_flaky_on_arrival(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """--new-test-runs 3: the new tests run 4 times in all, the known test (with history)
    once; t_new_flaky fails one run in three (drawn from its run id) and is flaky on arrival:
    the job fails; --new-test-warn only tells it."""
    history = [{"daysAgo": d, "status": "passed", "build": "ab_old"} for d in (1, 2, 3)]
    tests = {
        "t_known": {"durationSeconds": 5, "queuedSeconds": 1, "history": history},
        "t_new_good": {"durationSeconds": 5, "queuedSeconds": 1},
        "t_new_flaky": {"durationSeconds": 5, "queuedSeconds": 1, "flakyRuns": 1},
    }
    base = seed(**tests)
    base["tests"] = [t for t in base["tests"] if t["id"] not in ("t_pass", "t_broken")]
    apk = build_apk(tmp_path / "shop.apk", package="com.example.shop", version_code=7)
    junit, events = tmp_path / "r.xml", tmp_path / "events.jsonl"
    async with FakeService(base, speed=SPEED) as svc:
        env = env_of(svc)
        build = await upload(run_cli, svc, apk)
        job = await run_cli(
            "run", "project", "p_dt", "--build", build, "--wait", "--json",
            "--new-test-runs", "3", "--junit", str(junit), "--events", str(events),
            *FAST, env=env,
        )  # fmt: skip
        runs_of: dict[str, int] = {}
        for run in svc.backend.runs.values():
            if run.source != "history":
                runs_of[run.test.id] = runs_of.get(run.test.id, 0) + 1
    async with FakeService(base, speed=SPEED) as svc:  # the same, told only
        env = env_of(svc)
        build = await upload(run_cli, svc, apk)
        warned = await run_cli(
            "run", "project", "p_dt", "--build", build, "--wait", "--json",
            "--new-test-runs", "3", "--new-test-warn", *FAST, env=env,
        )  # fmt: skip
    assert runs_of == {"t_known": 1, "t_new_good": 4, "t_new_flaky": 4}
    assert job.code == 1, job.stderr
    entries = {entry["testId"]: entry for entry in job.json()}
    assert entries["t_new_flaky"]["newTest"]["flakyOnArrival"] is True
    assert entries["t_new_flaky"]["newTest"]["runs"] == 4
    assert entries["t_new_good"]["newTest"] == {"runs": 4, "passed": 4, "flakyOnArrival": False}
    assert "newTest" not in entries["t_known"]
    kinds = [a["kind"] for a in entries["t_new_good"]["attempts"]]
    assert kinds == ["run", "repeat", "repeat", "repeat"]
    assert "t_new_flaky is flaky on arrival: 3 of 4 runs passed" in job.stderr
    assert "new test t_new_good: 4 of 4 runs passed" in job.stderr
    case = ET.parse(junit).getroot().find("testcase[@classname='t_new_flaky']")
    assert case is not None
    assert case.find("failure") is not None
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert sum(1 for line in lines if line["event"] == "repeat_started") == 6
    assert next(line for line in lines if line["event"] == "new_tests")["tests"] == [
        "t_new_flaky",
        "t_new_good",
    ]
    # --new-test-warn: told, not failing the job; it reads as flaky (its failed run first).
    assert warned.code == 0, warned.stderr
    assert "it does not fail the job (--new-test-warn)" in warned.stderr
    flaky = {entry["testId"]: entry for entry in warned.json()}["t_new_flaky"]
    assert flaky["summary"]["outcome"] == "passed"
    assert flaky["newTest"]["flakyOnArrival"]


QUARANTINE = """\
# Reviewed like code.
[[quarantine]]
test = "t_fixed"
reason = "flaky on 2 of 3 builds"
until = 2099-01-01

[[quarantine]]
test = "t_still"
reason = "lost the device"
until = 2099-01-01
"""


async def test_quarantine_verify_lifts_only_a_test_whose_every_run_passed(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """`quarantine verify t_fixed --runs 10 --lift q.toml`: 10 runs, the bound stated, the
    entry removed (the rest of the file kept); t_still fails one of its 10: it keeps its
    entry and the command exits 1."""
    q = tmp_path / "q.toml"
    q.write_text(QUARANTINE)
    tests = {
        "t_fixed": {"durationSeconds": 5, "queuedSeconds": 1},
        "t_still": {"durationSeconds": 5, "queuedSeconds": 1, "flakyRuns": 1},
    }
    apk = build_apk(tmp_path / "shop.apk", package="com.example.shop", version_code=7)
    async with FakeService(seed(**tests), speed=SPEED) as svc:
        env = env_of(svc)
        build = await upload(run_cli, svc, apk)
        fixed = await run_cli(
            "quarantine", "verify", "t_fixed", "--runs", "10", "--build", build,
            "--lift", str(q), *FAST, env=env,
        )  # fmt: skip
        after_fixed = q.read_text()
        still = await run_cli(
            "quarantine", "verify", "t_still", "--runs", "10", "--lift", str(q), "--json",
            *FAST, env=env,
        )  # fmt: skip
        runs_of: dict[str, int] = {}
        for run in svc.backend.runs.values():
            runs_of[run.test.id] = runs_of.get(run.test.id, 0) + 1
        starts = len(svc.requests_for("run_test"))
    assert runs_of == {"t_fixed": 10, "t_still": 10}
    assert starts == 20
    assert fixed.code == 0, fixed.stderr
    assert (
        "t_fixed: 10 of 10 passed: its failure rate is below 26 % at 95 % confidence"
        in fixed.stdout
    )
    assert f"lifted the quarantine of t_fixed in {q}" in fixed.stderr
    assert 't_fixed"' not in after_fixed
    assert after_fixed.startswith('# Reviewed like code.\n[[quarantine]]\ntest = "t_still"')
    assert still.code == 1, still.stderr
    (told,) = still.json()
    assert (told["passed"], told["failed"], told["fixed"], told["lifted"]) == (9, 1, False, False)
    assert told["sentence"].startswith("9 of 10 passed (1 failed): its failure rate is below 40 %")
    assert "t_still keeps its quarantine" in still.stderr
    assert q.read_text() == after_fixed


async def test_quarantine_verify_refuses_before_any_request(
    run_cli: RunCli, tmp_path: Path
) -> None:
    q = tmp_path / "q.toml"
    q.write_text(QUARANTINE)
    async with FakeService(seed(), speed=SPEED) as svc:
        env = env_of(svc)
        cases = [
            ("t_pass", "--lift", str(q)),  # not listed: nothing to lift
            ("t_fixed", "--runs", "0"),
            ("t_fixed", "--runs", "101"),
            ("x_1",),
            ("t_fixed", "--timeout", "0"),
            ("t_fixed", "--build", "j_1"),
        ]
        results = [await run_cli("quarantine", "verify", *case, env=env) for case in cases]
        sent = sum(svc.request_counts().values())
    assert [r.code for r in results] == [2] * len(cases)
    assert all(len(r.stderr.strip().splitlines()) == 1 for r in results)
    assert "t_pass not in the quarantine file" in results[0].stderr
    assert sent == 0


async def test_quarantine_verify_stops_what_its_timeout_leaves_and_proves_nothing(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """Runs of 1,000 s at real speed, --timeout 0.5: both are stopped and named, neither is
    counted, the entry is kept, exit 1."""
    q = tmp_path / "q.toml"
    q.write_text(QUARANTINE)
    tests = {"t_fixed": {"durationSeconds": 1000, "queuedSeconds": 1}}
    apk = build_apk(tmp_path / "shop.apk", package="com.example.shop", version_code=7)
    async with FakeService(seed(**tests), speed=1.0) as svc:
        env = env_of(svc)
        build = await upload(run_cli, svc, apk)
        result = await run_cli(
            "quarantine", "verify", "t_fixed", "--runs", "2", "--build", build, "--timeout",
            "0.5", "--lift", str(q), *FAST, env=env,
        )  # fmt: skip
        stopped = [run for run in svc.backend.runs.values() if run.stopped_at is not None]
    assert result.code == 1, result.stderr
    assert len(stopped) == 2
    ids = " ".join(run.id for run in stopped)
    assert "stopped 2 run(s), not counted: " in result.stderr
    assert all(run.id in result.stderr for run in stopped), ids
    assert "t_fixed: 0 of 2 runs gave a verdict: nothing is proven" in result.stdout
    assert q.read_text() == QUARANTINE


COMMENTED = (
    "# Reviewed like code.\r\n"
    "[[quarantine]]\r\n"
    'test = "t_fixed"  # the payment page\r\n'
    'reason = "flaky on 2 of 3 builds"\r\n'
    "# checked by the mobile team\r\n"
    "until = 2099-01-01\r\n"
    "\r\n"
    "# Lost the device on the night runs: ask the farm.\r\n"
    "[[quarantine]]\r\n"
    'test = "t_still"\r\n'
    'reason = "lost the device"\r\n'
    "until = 2099-01-01\r\n"
)


def test_lift_keeps_line_endings_and_the_comments_of_other_entries(tmp_path: Path) -> None:
    """Before, the file came back with LF endings and without the comment above t_still (it
    was read as the tail of t_fixed's table)."""
    from asyncclient.quarantine import lift_quarantine

    q = tmp_path / "q.toml"
    q.write_bytes(COMMENTED.encode())
    assert lift_quarantine(q, ["t_fixed"]) == ["t_fixed"]
    assert q.read_bytes().decode() == (
        "# Reviewed like code.\r\n"
        "# Lost the device on the night runs: ask the farm.\r\n"
        "[[quarantine]]\r\n"
        'test = "t_still"\r\n'
        'reason = "lost the device"\r\n'
        "until = 2099-01-01\r\n"
    )
    q.write_bytes(COMMENTED.encode())
    assert lift_quarantine(q, ["t_still"]) == ["t_still"]
    assert q.read_bytes().decode() == COMMENTED[: COMMENTED.index("# Lost")]


async def test_an_inline_quarantine_array_is_refused_with_exit_2_before_any_run(
    run_cli: RunCli, tmp_path: Path
) -> None:
    q = tmp_path / "q.toml"
    inline = 'quarantine = [{test = "t_fixed", reason = "flaky", until = 2099-01-01}]\n'
    q.write_text(inline)
    async with FakeService(seed(t_fixed={"durationSeconds": 5}), speed=SPEED) as svc:
        result = await run_cli(
            "quarantine", "verify", "t_fixed", "--runs", "2", "--lift", str(q), env=env_of(svc)
        )
        sent = sum(svc.request_counts().values())
    assert result.code == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "quarantine is an inline array; write its entries as [[quarantine]] tables" in line
    assert sent == 0
    assert q.read_text() == inline


async def test_allure_renders_a_real_job_with_the_counts_it_reported(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """A job with a reused, a flaky, a failed and a quarantined test, written as Allure
    results and rendered by Allure's own command line: its counts are the job's, the flaky
    test's failed run is its retry, the quarantined one is muted; the next job, given the
    report's history, has a trend of two points."""
    import shutil

    from allure_support import generate

    apk = build_apk(tmp_path / "shop.apk", package="com.example.shop", version_code=7)
    tests = {
        "t_flaky": {"title": "Flaky", "durationSeconds": 15, "flakyRuns": 1},
        "t_quarantined": {"title": "Known", "outcome": "failed", "durationSeconds": 10},
    }
    quarantine = tmp_path / "quarantine.toml"
    quarantine.write_text(
        '[[quarantine]]\ntest = "t_quarantined"\nreason = "known"\nuntil = 2099-01-01\n'
    )
    async with FakeService(seed(**tests), speed=SPEED) as svc:
        env = env_of(svc)
        first = await upload(run_cli, svc, apk)
        earlier = await run_cli("run", "test", "t_pass", "--build", first, "--wait", *FAST, env=env)
        assert earlier.code == 0, earlier.stderr
        again = await upload(run_cli, svc, apk)
        jobs = []
        for number in (1, 2):
            folder = tmp_path / f"results{number}"
            with svc.hold("t_pass"):  # queued until reuse stops it, however slow the machine
                job = await run_cli(
                    "run", "project", "p_dt", "--build", again, "--wait", "--json",
                    "--reuse-passed", "7", "--retry-failed", "1", "--quarantine",
                    str(quarantine), "--allure-results", str(folder), *FAST, env=env,
                )  # fmt: skip
            assert job.code == 1, job.stderr  # t_broken failed
            jobs.append((job, folder))
    (job, folder), (_, next_folder) = jobs
    entries = {entry["testId"]: entry for entry in job.json()}
    assert "reused" in entries["t_pass"]
    assert entries["t_flaky"]["flaky"] is True
    assert entries["t_quarantined"]["quarantined"] is True
    shown = generate(folder, tmp_path / "report1")
    statistic = shown["summary"]["statistic"]
    # The job: t_pass (reused) and t_flaky passed, t_broken and t_quarantined failed.
    assert (statistic["passed"], statistic["failed"], statistic["total"]) == (2, 2, 4)
    results = [json.loads(p.read_text()) for p in folder.glob("*-result.json")]
    muted = [r for r in results if r["statusDetails"].get("muted")]
    assert [r["fullName"] for r in muted] == ["p_dt.t_quarantined"]
    assert {r["status"] for r in results if r["fullName"] == "p_dt.t_flaky"} == {
        "failed",
        "passed",
    }
    shutil.copytree(tmp_path / "report1" / "history", next_folder / "history")
    trend = generate(next_folder, tmp_path / "report2")["history-trend"]
    assert len(trend) == 2


async def test_a_pass_is_reused_when_the_services_clock_runs_ahead_of_ours(
    run_cli: RunCli, tmp_path: Path
) -> None:
    """The window of --reuse-passed is on the service's clock (its dates of this job's own
    runs): an emulator two days ahead of real time dates its history so, and reuses all the
    same; only the test that passed there is stopped."""
    apk = build_apk(tmp_path / "shop.apk", package="com.example.shop", version_code=7)
    async with FakeService(seed(), speed=SPEED) as svc:
        env = env_of(svc)
        svc.advance(2 * 86400)
        first_build = await upload(run_cli, svc, apk)
        job1 = await run_cli(
            "run", "project", "p_dt", "--build", first_build, "--wait", "--json", *FAST, env=env
        )
        assert job1.code == 1, job1.stderr
        earlier = {entry["testId"]: entry["id"] for entry in job1.json()}
        again = await upload(run_cli, svc, apk)
        with svc.hold("t_pass"):  # queued until reuse stops it; --timeout ends it if never
            job2 = await run_cli(
                "run", "project", "p_dt", "--build", again, "--wait", "--json",
                "--reuse-passed", "7", "--timeout", "60", *FAST, env=env,
            )  # fmt: skip
        entries = {entry["testId"]: entry for entry in job2.json()}
        stopped = [run for run in svc.backend.runs.values() if run.stopped_at is not None]
    assert job2.code == 1, job2.stderr  # t_broken fails, as before
    assert entries["t_pass"]["reused"]["earlierRunId"] == earlier["t_pass"]
    assert [run.id for run in stopped] == [entries["t_pass"]["id"]]
    assert "reused" not in entries["t_broken"]
