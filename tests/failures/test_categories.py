"""Why it failed: the failure categories file (read like the quarantine file, its regexes
matched by RE2 in linear time), the labelled corpus of the demo seed clustered against its
labels, failures grouped across jobs with no request beyond the flakiness listings, and a job
with an outage: one cluster first, re-run as infrastructure, no test flaky from it, and an app
failure seen on the same build before not re-run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncclient import AsyncSession
from asyncclient.errors import ValidationError
from asyncclient.failures import (
    BUILT_IN,
    Categories,
    Category,
    find_categories,
    load_categories,
    regex_problem,
)
from asyncclient.failures._agreement import adjusted_rand_index, purity
from asyncclient.models import Run
from asyncclient.suite import RerunSkipped, SuitePolicy, SuiteRun
from asyncclient.testing import FakeService
from asyncclient.testing._demo_seed import DEMO

# --- the categories file ------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    where = tmp_path / "failure-categories.toml"
    where.write_text(text, encoding="utf-8")
    return where


def run_of(status: str, headline: str = "", reason: str = "") -> Run:
    checks = [{"id": "r1", "title": "A check", "result": "failed", "reason": reason}]
    return Run(
        id="j_00000001",
        test_id="t_a",
        status=status,
        final=True,
        headline=headline,
        requirements=checks if reason else [],
    )


def test_the_first_matching_category_wins_then_the_built_in_ones(tmp_path: Path) -> None:
    found = load_categories(
        write(
            tmp_path,
            """
# reviewed like code
[[category]]
name = "device farm lost the device"
kind = "infrastructure"
match = "LOST ITS CONNECTION"      # case does not matter
statuses = ["error", "failed"]

[[category]]
name = "staging down"
kind = "infrastructure"
regex = 'HTTP (502|503) from staging\\.'

[[category]]
name = "anything about the connection"
kind = "app"
match = "connection"
""",
        )
    )
    assert [c.name for c in found.categories] == [
        "device farm lost the device",
        "staging down",
        "anything about the connection",
    ]
    lost = run_of("failed", "The device lost its connection to the tester.")
    assert found.of(lost).name == "device farm lost the device"  # the first of two that match
    assert found.infrastructure(lost)
    # statuses: a blocked run is not of the first category, so the third matches.
    assert found.of(run_of("blocked", "lost its connection")).name == (
        "anything about the connection"
    )
    # The failed check's reason is read too.
    assert found.of(run_of("failed", "", "HTTP 503 from staging.")).name == "staging down"
    # No category of the file: the built-in ones (error and inconclusive: infrastructure).
    assert found.of(run_of("error", "Out of memory")) == BUILT_IN[0]
    assert found.of(run_of("inconclusive")).kind == "infrastructure"
    assert found.of(run_of("failed", "The total was wrong")) == BUILT_IN[-1]
    assert not found.infrastructure(run_of("failed", "The total was wrong"))


def test_a_category_may_say_an_error_is_the_apps(tmp_path: Path) -> None:
    found = load_categories(
        write(tmp_path, '[[category]]\nname = "crash"\nkind = "app"\nregex = "crash(ed)?"\n')
    )
    crash = run_of("error", "The app crashed on launch.")
    assert (found.of(crash).name, found.infrastructure(crash)) == ("crash", False)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[[category]]\nname = 'x'\nkind = 'infra'\nmatch = 'y'\n", "kind must be"),
        ("[[category]]\nname = 'x'\nkind = 'app'\n", "give match, regex or statuses"),
        ("[[category]]\nname = 'x'\nkind = 'app'\nmatch = 'a'\nregex = 'b'\n", "not both"),
        ("[[category]]\nname = 'x'\nkind = 'app'\nmatch = 'a'\nowner = 'me'\n", "unknown key"),
        ("[[category]]\nname = 'x'\nkind = 'app'\nstatuses = ['passed']\n", "statuses must"),
        (
            "[[category]]\nname = 'x'\nkind = 'app'\nregex = '('\n",
            "not a regular expression RE2 can run",
        ),
        ("[[category]]\nkind = 'app'\nmatch = 'a'\n", "name must be"),
        ("[[category]]\nname = \"a\\nb\"\nkind = 'app'\nmatch = 'a'\n", "one line"),
        ("[[category]]\nname = 'x'\nkind = 'app'\nmatch = 'a'\n" * 2, "used twice"),
        ("category = 'x'\n", "array of tables"),
        ("[[quarantine]]\ntest = 't_a'\n", "unknown table"),
        ("[[category]\n", "not valid TOML"),
    ],
)
def test_a_wrong_file_is_refused_in_one_line_naming_the_fix(
    tmp_path: Path, text: str, said: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        load_categories(write(tmp_path, text))
    message = str(caught.value)
    assert said in message
    assert "\n" not in message
    assert str(tmp_path) in message


HOSTILE = [
    ("(a+)+$", "a" * 3999 + "!", False),  # the textbook case: exponential in Python's re
    ("(a*)*b", "a" * 4000, False),
    ("(\\w+\\s?)+$", "word " * 799 + "!", False),
    ("(a|aa)+$", "a" * 3999 + "!", False),
    ("(.*a){3,}", "a" * 4000, True),
    ("([a-z]+)*@", "abc" * 1333, False),
    # Polynomial: 372 s in Python's re on a 4,000-character headline of repeats.
    ("error.*device.*lost.*connection.*tester", "error device lost connection " * 137, False),
    ("a.*b.*c.*d", "abc" * 1333, False),
]


@pytest.mark.parametrize(("pattern", "text", "found"), HOSTILE)
def test_a_pattern_that_backtracks_in_pythons_re_matches_in_linear_time(
    pattern: str, text: str, found: bool
) -> None:
    """RE2 matches each at once: in Python's re each takes from seconds to hours, in one C
    call no signal interrupts (pytest's timeout would end this test, failing it)."""
    assert regex_problem(pattern) is None
    category = Category("hostile", "infrastructure", regex=pattern)
    assert category.matches("error", text[:4000]) is found
    categories = Categories(None, (category,))
    runs = [run_of("error", headline=text[:4000]) for _ in range(20)]
    assert [categories.of(run).name for run in runs] == ["hostile" if found else "run error"] * 20


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("(a)\\1", "back-references cannot be matched in linear time"),
        ("(?=a)b", "no lookaround"),
        ("(?<!a)b", "no lookaround"),
        ("(?>a+)+b", "atomic groups"),
        ("a++b", "a quantifier may not follow another"),
        ("a{1001}", "counts go up to 1000"),
        ("(", "not a regular expression RE2 can run (missing )"),
    ],
)
def test_what_re2_cannot_run_in_linear_time_is_refused_naming_why(
    tmp_path: Path, pattern: str, why: str
) -> None:
    problem = regex_problem(pattern)
    assert problem is not None
    assert why in problem
    where = write(
        tmp_path,
        f"[[category]]\nname = 'slow'\nkind = 'app'\nregex = '''{pattern}'''\n",
    )
    with pytest.raises(ValidationError, match="refused") as raised:
        load_categories(where)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "pattern",
    [
        "lost its (connection|link)",
        "HTTP 5\\d\\d from \\S+",
        "timeout after \\d+ ?s",
        "(foo|bar)+",
        "(ab)+c",
        "[a-z]+@[a-z]+\\.com",
        "(?P<host>[a-z]+) refused",
        "[[:alpha:]]+ lost",
    ],
)
def test_an_ordinary_regex_is_kept(pattern: str) -> None:
    assert regex_problem(pattern) is None


def test_the_default_file_is_read_when_there_and_an_unreadable_one_stops(
    tmp_path: Path,
) -> None:
    assert find_categories(directory=tmp_path) == Categories()  # none there: built in
    write(tmp_path, "[[category]]\nname = 'x'\nkind = 'app'\nmatch = 'y'\n")
    assert [c.name for c in find_categories(directory=tmp_path).categories] == ["x"]
    (tmp_path / "failure-categories.toml").unlink()
    (tmp_path / "failure-categories.toml").mkdir()  # there, but not a file: never skipped
    with pytest.raises(ValidationError, match="is a directory"):
        find_categories(directory=tmp_path)
    with pytest.raises(ValidationError, match="no categories file"):
        find_categories(tmp_path / "missing.toml")


# --- the labelled corpus of the demo seed ------------------------------------------------------


def test_the_measures_are_those_of_the_textbook() -> None:
    assert adjusted_rand_index("aabb", "xxyy") == 1.0
    assert adjusted_rand_index("aabb", "xxxy") == 0.0  # no better than chance
    assert adjusted_rand_index("aabb", "xyxy") < 0
    assert purity("aabb", "xxxx") == 0.5
    assert purity("aabb", "xyzw") == 1.0  # purity alone rewards splitting: hence the ARI


def seed_labels() -> dict[tuple[str, int], str]:
    """(test, its n-th failed run of the history, oldest first) -> the seed's label."""
    found: dict[tuple[str, int], str] = {}
    for test in DEMO["tests"]:
        entries = sorted(test.get("history", []), key=lambda e: -e["daysAgo"])
        failed = [e for e in entries if e["status"] not in ("passed", "cancelled")]
        for n, entry in enumerate(failed):
            found[(test["id"], n)] = entry["label"]
    return found


async def test_the_demo_seeds_corpus_clusters_as_its_labels_say() -> None:
    async with FakeService() as svc, AsyncSession(svc.run_key, svc.url) as session:
        report = await session.failure_clusters("p_demo")
        listings = svc.request_counts()["list_runs"]
        # Bounded as `flaky` is: a listing to find the tests and one per test, then for each
        # test the full views of its failed runs (their list view does not say what they
        # failed of: one ids= read of 50 each here).
        assert listings == report.requests == 1 + 4 + 4
        svc.reset_requests()
        flakiness = await session.flakiness("p_demo")
        assert svc.request_counts()["list_runs"] == flakiness.requests == 1 + 4
        svc.reset_requests()
        text = Categories(None, (Category("x", "app", match="voucher"),))
        await session.flakiness("p_demo", categories=text)
        # With categories that read the text, `flaky` makes the very same requests.
        assert svc.request_counts()["list_runs"] == report.requests
        ids = [run_id for c in report.clusters for run_id in c.run_ids]
        runs = [
            run for i in range(0, len(ids), 50) for run in await session.list_runs(ids[i : i + 50])
        ]
    cluster_of = {run_id: c.id for c in report.clusters for run_id in c.run_ids}
    runs.sort(key=lambda run: (run.test_id or "", run.created_at or 0))
    labels, clusters = [], []
    seen: Counter[str] = Counter()
    for run in runs:
        assert run.test_id is not None
        labels.append(seed_labels()[(run.test_id, seen[run.test_id])])
        seen[run.test_id] += 1
        clusters.append(cluster_of[run.id])
    assert len(labels) == len(seed_labels()) == report.failures == 15
    assert len(set(labels)) == 4
    assert purity(labels, clusters) >= 0.95
    assert adjusted_rand_index(labels, clusters) >= 0.95
    # The widest first: t_checkout's voucher bug (5 runs), then the two causes of 4 runs.
    first = report.clusters[0]
    assert (first.count, first.tests, first.category.kind) == (5, ("t_checkout",), "app")
    outage = next(c for c in report.clusters if "connection refused" in c.signature)
    assert (outage.count, len(outage.tests), outage.category.kind) == (4, 4, "infrastructure")
    assert outage.first is not None
    assert outage.last is not None
    assert not report.is_new(outage)  # four days ago


# --- a job with an outage ------------------------------------------------------------------------

OUTAGE_REASON = "The device lost its connection to the tester."


def outage_seed() -> dict[str, Any]:
    """p_out: 12 android tests on ab_out_1. Nine lose their device on their first run (error),
    then pass; three fail the app's way, t_app_0 as it did on ab_out_1 twice before, t_app_1
    as it did there once, but its history shows it flaky (it passed and failed on ab_out_0)."""
    tests: list[dict[str, Any]] = []
    for i in range(9):
        tests.append(
            {
                "id": f"t_dev_{i}",
                "project": "p_out",
                "title": f"Screen {i}",
                "target": "android",
                "appId": "com.example.out",
                "outcome": "passed",
                "flakyRuns": 1,
                "flakyStatus": "error",
                "flakyReason": OUTAGE_REASON,
                "durationSeconds": 20,
                "queuedSeconds": 1,
                "history": [
                    {"daysAgo": 1.0 + i / 100, "status": "passed", "build": "ab_out_1"},
                ],
            }
        )
    for i in range(3):
        known = i == 0
        history = [{"daysAgo": 2.0, "status": "passed", "build": "ab_out_0"}]
        if known:
            history += [
                {"daysAgo": 1.5, "status": "failed", "build": "ab_out_1"},
                {"daysAgo": 1.2, "status": "failed", "build": "ab_out_1"},
            ]
        elif i == 1:  # it failed the same way on ab_out_1, but flakes: passed and failed on 0
            history += [
                {"daysAgo": 1.9, "status": "failed", "build": "ab_out_0"},
                {"daysAgo": 1.2, "status": "failed", "build": "ab_out_1"},
            ]
        tests.append(
            {
                "id": f"t_app_{i}",
                "project": "p_out",
                "title": f"Pay {i}",
                "target": "android",
                "appId": "com.example.out",
                "outcome": "failed",
                "headline": f"The total stayed ${40 + i}.00.",
                "requirements": [
                    {
                        "title": "The total changes",
                        "result": "failed",
                        "reason": f"The total stayed ${40 + i}.00 instead of ${36 + i}.00.",
                    }
                ],
                "durationSeconds": 20,
                "queuedSeconds": 1,
                "history": history,
            }
        )
    return {
        "projects": [{"id": "p_out", "name": "Outage", "plan": "paid", "includedRuns": 1000}],
        "keys": [{"key": "k", "capability": "run", "projects": ["p_out"]}],
        "tests": tests,
        "builds": [
            {
                "id": "ab_out_1",
                "project": "p_out",
                "platform": "android",
                "appId": "com.example.out",
                "appName": "Out",
                "version": "1.0",
                "versionCode": "1",
            }
        ],
    }


@pytest.mark.parametrize("strategy", ["rounds", "at-once"])
async def test_an_outage_is_one_cause_rerun_as_infrastructure_and_flakes_nothing(
    strategy: str,
) -> None:
    policy = SuitePolicy(
        retry_failed=2,
        retry_strategy=strategy,  # type: ignore[arg-type]
        interval=0.05,
    )
    async with FakeService(outage_seed(), speed=1000) as svc, AsyncSession("k", svc.url) as session:
        suite = SuiteRun.for_project(session, "p_out", build_id="ab_out_1", policy=policy)
        events: list[Any] = []
        suite.observe(events.append)
        report = await suite.wait()
    by_test = {t.test_id: t for t in report.tests}
    # One cluster first: the nine tests that lost their device.
    first = report.causes[0]
    # 16 failed runs: the nine, the known failure once, the two others three times each.
    assert (first.count, len(first.tests), first.failures) == (9, 9, 16)
    assert (first.category, first.status) == ("infrastructure", "error")
    # Re-run as infrastructure, passed, and not flaky.
    for i in range(9):
        test = by_test[f"t_dev_{i}"]
        assert (test.outcome, test.recovered, test.flaky) == ("passed", True, False)
        # rounds: one re-run; at-once: both start together, the first pass stops the other.
        assert len(test.attempts) == (2 if strategy == "rounds" else 3)
    assert not any(t.flaky for t in report.tests)
    # The app failure seen on this build before is not re-run, and the report says why.
    known = by_test["t_app_0"]
    assert (known.outcome, len(known.attempts)) == ("failed", 1)
    assert known.not_rerun == "fails the same way as on its last 2 runs of ab_out_1"
    skipped = [e for e in events if isinstance(e, RerunSkipped)]
    assert [(e.test_id, e.runs) for e in skipped] == [("t_app_0", 2)]
    # The other app failures get their re-runs: t_app_1 flakes (a failure says little), t_app_2
    # is new on this build.
    assert [len(by_test[f"t_app_{i}"].attempts) for i in (1, 2)] == [3, 3]
    from asyncclient._reports.text import summary_lines

    lines = summary_lines(report)
    assert lines[0].startswith(
        "why it failed: 9 of 16 failures share: The run failed before its first check: "
        "The device lost its connection to the tester. (error, infrastructure; 9 tests"
    ) or lines[0].startswith("why it failed: 9 of ")
    assert any("not re-run: fails the same way as on its last 2 runs of ab_out_1" in line
               for line in lines)  # fmt: skip
    assert "12 tests: 9 passed (9 on a re-run after an infrastructure failure: not flaky)" in (
        report.counts
    )
    # JUnit still valid against Surefire's XSD, CTRF against its schema, each with the cause.
    from report_support import ctrf_is_valid, junit_is_valid

    case = junit_is_valid(report).find(".//testcase[@name='Pay 0']")
    assert case is not None
    said = case.findtext("system-out") or ""
    assert "category: app or test (app)" in said
    assert "not re-run: fails the same way as on its last 2 runs of ab_out_1" in said
    ctrf = ctrf_is_valid(report)
    pay = next(t for t in ctrf["results"]["tests"] if t["name"] == "Pay 0")
    assert pay["extra"]["cause"]["category"] == "app"
    assert pay["extra"]["notRerun"].startswith("fails the same way")
    assert not any(t.get("flaky") for t in ctrf["results"]["tests"])


async def test_rerun_known_re_runs_the_known_failure_too() -> None:
    policy = SuitePolicy(retry_failed=1, rerun_known=True, interval=0.05)
    async with FakeService(outage_seed(), speed=1000) as svc, AsyncSession("k", svc.url) as session:
        report = await SuiteRun.for_project(
            session, "p_out", build_id="ab_out_1", policy=policy
        ).wait()
    known = next(t for t in report.tests if t.test_id == "t_app_0")
    assert (len(known.attempts), known.not_rerun) == (2, None)


# --- hostile files -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_pattern_is_kept_or_refused_never_raised(pattern: str) -> None:
    problem = regex_problem(pattern)
    if problem is None:
        Category("kept", "app", regex=pattern)  # a kept pattern compiles
    else:
        assert "\n" not in problem


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.binary(max_size=400))
def test_any_bytes_are_categories_or_one_line(tmp_path: Path, data: bytes) -> None:
    where = tmp_path / "failure-categories.toml"
    where.write_bytes(data)
    problem, found = None, None
    try:
        found = load_categories(where)
    except ValidationError as exc:
        problem = str(exc)
    if problem is None:
        assert isinstance(found, Categories)
    else:
        assert "\n" not in problem


def test_a_pattern_pythons_re_warns_of_is_read_without_a_warning() -> None:
    # `[[` may mean a nested set in a later Python's re (a FutureWarning there); RE2 reads it
    # as a class holding `[` (found by the property test).
    assert regex_problem("[[a]") is None
    assert Category("x", "app", regex="[[a]").matches("failed", "[")


async def test_failures_across_jobs_are_classified_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`failure_clusters` (the MCP tool's) and `flakiness` match the categories in a worker
    thread: the loop that serves requests never runs a pattern."""
    import threading

    loop_thread = threading.current_thread()
    seen: list[threading.Thread] = []
    original = Category.matches

    def matches(self: Category, status: str, text: str) -> bool:
        seen.append(threading.current_thread())
        return original(self, status, text)

    monkeypatch.setattr(Category, "matches", matches)
    text = Categories(None, (Category("lost", "infrastructure", regex="lost.*device"),))
    async with FakeService() as svc, AsyncSession(svc.run_key, svc.url) as session:
        report = await session.failure_clusters("p_demo", categories=text)
        flaky = await session.flakiness("p_demo", categories=text)
    assert report.clusters
    assert flaky.tests
    assert seen
    assert loop_thread not in seen
