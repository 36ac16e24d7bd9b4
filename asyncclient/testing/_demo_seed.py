"""The built-in demo seed, as the dict a JSON seed file would hold (camelCase).

Data only: p_demo (paid), p_free (free) and p_new (paid: t_wishlist, a new test flaky on
arrival), keys demo-run and demo-edit, their tests and builds, and two weeks of p_demo's history
(finished runs on earlier builds): t_login and t_search stable, t_onboarding flaky on two builds,
t_checkout broken since build 43.
"""

from typing import Any

__all__ = ["DEMO"]

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
                {"daysAgo": 8.2, "status": "passed", "build": "ab_demo_android_42"},
                {"daysAgo": 6.1, "status": "passed", "build": "ab_demo_android_43"},
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
                {"daysAgo": 6.0, "status": "failed", "build": "ab_demo_android_43"},
                {"daysAgo": 5.9, "status": "failed", "build": "ab_demo_android_43"},
                {"daysAgo": 4.3, "status": "failed", "build": "ab_demo_android_44"},
                {"daysAgo": 2.2, "status": "failed", "build": "ab_demo_android_45"},
                {"daysAgo": 2.1, "status": "failed", "build": "ab_demo_android_45"},
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
                {"daysAgo": 6.5, "status": "passed"},
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
            # Flaky: its first run fails (the device drops), a re-run passes (demo --retry).
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
                {"daysAgo": 9.3, "status": "failed", "build": "ab_demo_ios_98"},
                {"daysAgo": 9.2, "status": "passed", "build": "ab_demo_ios_98"},
                {"daysAgo": 7.4, "status": "passed", "build": "ab_demo_ios_99"},
                {"daysAgo": 5.3, "status": "passed", "build": "ab_demo_ios_99"},
                {"daysAgo": 3.2, "status": "error", "build": "ab_demo_ios_100"},
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
            # New: no run yet. Its first run of each suite fails, its repeats pass: flaky on
            # arrival (run project p_new --new-test-runs 3).
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
