"""The built-in demo seed, as a JSON seed file would hold it: p_demo, p_free and p_new, the keys
demo-run and demo-edit, their tests and builds, and two weeks of p_demo's history (t_login and
t_search stable, t_onboarding flaky, t_checkout broken), whose failures carry a `label` of their
cause, a corpus tests/test_failures.py measures the grouping against. `tour_seed()` is what
`asyncclient demo` tours: the same, plus main's builds and a device the farm loses.
"""

import copy
from typing import Any

__all__ = ["DEMO", "tour_seed"]

_OUTAGE = "The tester could not reach the app: connection refused by {} after {} s."
_LOST = "The device farm lost the device at {} (node {})."


def _outage(days_ago: float, build: str | None, address: str, seconds: int) -> dict[str, Any]:
    """A run that ended in error in the outage four days ago (the same cause in every test)."""
    found: dict[str, Any] = {"daysAgo": days_ago, "status": "error"}
    if build is not None:
        found["build"] = build
    return {**found, "headline": _OUTAGE.format(address, seconds), "label": "outage"}


def _lost(days_ago: float, build: str | None, at: str, node: str) -> dict[str, Any]:
    """A run that ended in error because the device farm lost the device (a blip)."""
    found: dict[str, Any] = {"daysAgo": days_ago, "status": "error"}
    if build is not None:
        found["build"] = build
    return {**found, "headline": _LOST.format(at, node), "label": "device lost"}


def _voucher(days_ago: float, build: str, code: str, total: str, expected: str) -> dict[str, Any]:
    """t_checkout's bug: the voucher does not change the total."""
    return {
        "daysAgo": days_ago,
        "status": "failed",
        "build": build,
        "reason": f"The voucher {code} from create_voucher was accepted, but the total stayed "
        f"{total} instead of {expected}.",
        "label": "voucher total",
    }


def _no_continue(days_ago: float, build: str, page: int, seconds: int) -> dict[str, Any]:
    """t_onboarding's flake: a page without its Continue button."""
    return {
        "daysAgo": days_ago,
        "status": "failed",
        "build": build,
        "headline": f"Onboarding stopped on page {page} of 4.",
        "reason": f"Page {page} showed no Continue button after {seconds} s.",
        "label": "no continue button",
    }


DEMO: dict[str, Any] = {
    "projects": [
        {"id": "p_demo", "name": "Demo shop", "plan": "paid", "includedRuns": 100},
        {"id": "p_free", "name": "Free sandbox", "plan": "free", "includedRuns": 20},
        {"id": "p_new", "name": "New tests", "plan": "paid", "includedRuns": 1000},
    ],
    "keys": [
        {"key": "demo-run", "capability": "run", "projects": ["p_demo", "p_free", "p_new"]},
        {"key": "demo-edit", "capability": "edit", "projects": ["p_demo", "p_free", "p_new"]},
    ],
    "tests": [
        {
            "id": "t_login",
            "project": "p_demo",
            "title": "Log in with a valid account",
            "target": "android",
            "appId": "com.example.shop",
            "outcome": "passed",
            "requirements": [
                {
                    "title": "The login form accepts a valid account",
                    "result": "passed",
                    "reason": "Signed in as demo@example.com without an error message.",
                },
                {
                    "title": "The home screen greets the user by name",
                    "result": "passed",
                    "reason": "The home screen showed 'Welcome back, Dana'.",
                },
            ],
            "captures": {"user": "demo@example.com", "greeting": "Welcome back, Dana"},
            "headline": "Logged in and reached the home screen.",
            "history": [
                {"daysAgo": 13.2, "status": "passed", "build": "ab_demo_android_41"},
                {"daysAgo": 12.1, "status": "passed", "build": "ab_demo_android_41"},
                {"daysAgo": 10.3, "status": "passed", "build": "ab_demo_android_42"},
                _lost(9.0, "ab_demo_android_42", "03:12:09", "n-14"),
                {"daysAgo": 8.2, "status": "passed", "build": "ab_demo_android_42"},
                {"daysAgo": 6.1, "status": "passed", "build": "ab_demo_android_43"},
                _outage(4.5, "ab_demo_android_44", "10.3.0.17:8443", 30),
                {"daysAgo": 4.4, "status": "passed", "build": "ab_demo_android_44"},
                {"daysAgo": 2.3, "status": "passed", "build": "ab_demo_android_45"},
                {"daysAgo": 1.2, "status": "passed", "build": "ab_demo_android_45"},
            ],
            "durationSeconds": 30,
            "queuedSeconds": 3,
            "durationJitter": 0.3,
            "learnedPath": "fresh",
            "screenshots": 3,
        },
        {
            "id": "t_checkout",
            "project": "p_demo",
            "title": "Check out with a voucher",
            "target": "android",
            "appId": "com.example.shop",
            "outcome": "failed",
            "requirements": [
                {
                    "title": "The cart shows the added items",
                    "result": "passed",
                    "reason": "Both items and the total of $42.00 were on the cart screen.",
                },
                {
                    "title": "A voucher code reduces the total",
                    "result": "failed",
                    "reason": "The voucher SAVE10 from create_voucher was accepted, but the "
                    "total stayed $42.00 instead of $37.80.",
                },
                {
                    "title": "The order confirmation appears",
                    "result": "passed",
                    "reason": "The confirmation screen showed order number 10023.",
                },
            ],
            "captures": {"voucher": "SAVE10", "total": "$42.00", "order": "10023"},
            "headline": "The voucher was accepted but the total did not change.",
            "durationSeconds": 50,
            "queuedSeconds": 4,
            "durationJitter": 0.2,
            "learnedPath": "stale",
            "usesEndpoints": ["create_voucher"],
            "history": [
                {"daysAgo": 13.1, "status": "passed", "build": "ab_demo_android_41"},
                {"daysAgo": 12.0, "status": "passed", "build": "ab_demo_android_41"},
                {"daysAgo": 10.2, "status": "passed", "build": "ab_demo_android_42"},
                {"daysAgo": 8.1, "status": "passed", "build": "ab_demo_android_42"},
                _voucher(6.0, "ab_demo_android_43", "SAVE10", "$42.00", "$37.80"),
                _voucher(5.9, "ab_demo_android_43", "SAVE15", "$58.40", "$49.64"),
                _outage(4.52, "ab_demo_android_44", "10.3.0.17:8443", 31),
                _voucher(4.3, "ab_demo_android_44", "SPRING5", "$19.99", "$18.99"),
                _lost(3.0, "ab_demo_android_44", "22:41:50", "n-3"),
                _voucher(2.2, "ab_demo_android_45", "SAVE10", "$42.00", "$37.80"),
                _voucher(2.1, "ab_demo_android_45", "VIP20", "$120.00", "$96.00"),
                {"daysAgo": 1.1, "status": "cancelled", "build": "ab_demo_android_45"},
            ],
            "screenshots": 4,
        },
        {
            "id": "t_search",
            "project": "p_demo",
            "title": "Search the catalogue",
            "target": "web",
            "url": "https://shop.example.com",
            "outcome": "passed",
            "requirements": [
                {
                    "title": "Searching 'lamp' lists matching products",
                    "result": "passed",
                    "reason": "12 results, all with 'lamp' in the title.",
                }
            ],
            "captures": {"query": "lamp", "results": 12},
            "headline": "The search returned 12 matching products.",
            "durationSeconds": 20,
            "queuedSeconds": 2,
            "durationJitter": 0.25,
            "learnedPath": "none",
            "screenshots": 2,
            "history": [
                {"daysAgo": 12.5, "status": "passed"},
                {"daysAgo": 9.5, "status": "passed"},
                _lost(7.9, None, "14:02:33", "n-9"),
                {"daysAgo": 6.5, "status": "passed"},
                _outage(4.51, None, "10.3.0.18:8443", 30),
                {"daysAgo": 3.5, "status": "passed"},
                {"daysAgo": 0.5, "status": "passed"},
            ],
        },
        {
            "id": "t_onboarding",
            "project": "p_demo",
            "title": "Finish onboarding",
            "target": "ios",
            "appId": "com.example.shop.ios",
            "outcome": "passed",
            # Flaky: the first run fails, a re-run passes.
            "flakyRuns": 1,
            "requirements": [
                {
                    "title": "Every onboarding page can be passed",
                    "result": "passed",
                    "reason": "Passed all 4 pages with Continue.",
                },
                {
                    "title": "Onboarding ends on the shop's front page",
                    "result": "passed",
                    "reason": "The front page with 'Today's picks' appeared.",
                },
            ],
            "captures": {"pages": 4},
            "headline": "Onboarding finished on the front page.",
            "history": [
                {"daysAgo": 11.4, "status": "passed", "build": "ab_demo_ios_98"},
                _no_continue(9.3, "ab_demo_ios_98", 3, 12),
                {"daysAgo": 9.2, "status": "passed", "build": "ab_demo_ios_98"},
                {"daysAgo": 7.4, "status": "passed", "build": "ab_demo_ios_99"},
                _lost(6.2, "ab_demo_ios_99", "08:17:04", "n-22"),
                {"daysAgo": 5.3, "status": "passed", "build": "ab_demo_ios_99"},
                _outage(4.53, "ab_demo_ios_99", "10.3.0.21:8443", 29),
                _no_continue(3.2, "ab_demo_ios_100", 2, 9),
                {"daysAgo": 3.1, "status": "passed", "build": "ab_demo_ios_100"},
                {"daysAgo": 1.3, "status": "passed", "build": "ab_demo_ios_100"},
            ],
            "durationSeconds": 40,
            "queuedSeconds": 3,
            "durationJitter": 0.3,
            "learnedPath": "fresh",
            "screenshots": 4,
        },
        {
            "id": "t_free_home",
            "project": "p_free",
            "title": "Open the home page",
            "target": "web",
            "url": "https://free.example.com",
            "outcome": "passed",
            "durationSeconds": 20,
            "queuedSeconds": 2,
        },
        {
            "id": "t_free_voucher",
            "project": "p_free",
            "title": "Redeem a voucher",
            "target": "web",
            "url": "https://free.example.com/redeem",
            "outcome": "passed",
            "usesEndpoints": ["create_voucher"],
            "durationSeconds": 25,
            "queuedSeconds": 2,
        },
        {
            # New: its first run fails, repeats pass: flaky on arrival.
            "id": "t_wishlist",
            "project": "p_new",
            "title": "Add a product to the wishlist",
            "target": "web",
            "url": "https://shop.example.com/wishlist",
            "outcome": "passed",
            "flakyRuns": 1,
            "flakyReason": "The wishlist badge still showed 0 when the step checked it.",
            "headline": "The product appeared in the wishlist.",
            "durationSeconds": 15,
            "queuedSeconds": 2,
        },
    ],
    "builds": [
        {
            "id": "ab_demo_ios_100",
            "project": "p_demo",
            "platform": "ios",
            "appId": "com.example.shop.ios",
            "appName": "Shop",
            "version": "1.0.0",
            "versionCode": "100",
            "label": "seed",
        }
    ],
    "endpoints": [
        {
            "id": "ep_demo_voucher",
            "project": "p_demo",
            "name": "create_voucher",
            "description": "Creates a one-time voucher code for the demo shop. Use it when a test "
            'needs a valid voucher; it returns {"code": "..."}.',
            "method": "POST",
            "url": "https://shop.example.com/test-hooks/vouchers",
            "headers": {"X-Hook-Token": "demo-hook-secret"},
            "bodyTemplate": '{"percent": {{percent}}}',
        }
    ],
}

_MAIN = "ref=main commit=4f1c2a9e0b7d3c5a8e6f1b2d4c6a8e0f2b4d6c8a"


def tour_seed() -> dict[str, Any]:
    """The demo seed as `asyncclient demo` tours it: main's newest builds of the files the
    tour uploads and runs (labelled as uploads in CI label them, for `--baseline auto`),
    t_onboarding's flake failing as on its earlier days (its first run ends before the copies
    hedging starts beside it), and t_search's first run lost by the device farm (`error`: an
    infrastructure cause, re-run, no flake)."""
    seed = copy.deepcopy(DEMO)
    tests = {test["id"]: test for test in seed["tests"]}
    # Its runs all take their usual time: the first, the flaky one, ends before its copies.
    tests["t_onboarding"].update(
        flakyReason="Page 3 showed no Continue button after 12 s.", durationJitter=0
    )
    tests["t_search"].update(
        flakyRuns=1,
        flakyReason="The device lost its connection to the tester in the middle of a step.",
        flakyStatus="error",
    )
    app = {"project": "p_demo", "appName": "Shop", "label": _MAIN}
    seed["builds"][:0] = [
        {"id": "ab_demo_android_45", "platform": "android", "appId": "com.example.shop",
         "version": "2.3.0", "versionCode": "230", "fileName": "shop.apk", **app},
        {"id": "ab_demo_ios_99", "platform": "ios", "appId": "com.example.shop.ios",
         "version": "0.9.0", "versionCode": "99", "fileName": "Shop-1.0.0.app.zip", **app},
    ]  # fmt: skip
    return seed
