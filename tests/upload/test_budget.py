"""The shared budget of parts in flight (asyncclient.upload._budget): resizing it, and the
window of builds that follows it."""

import asyncio

from asyncclient.upload._budget import Budget, Window


async def test_a_raise_starts_waiters_at_once_and_a_cut_lets_parts_finish() -> None:
    budget = Budget(2)
    started: list[int] = []
    release = asyncio.Event()

    async def part(number: int) -> None:
        async with budget.slot((0, number)):
            started.append(number)
            await release.wait()

    tasks = [asyncio.create_task(part(n)) for n in range(1, 7)]
    await asyncio.sleep(0)
    assert started == [1, 2]
    budget.resize(5)
    await asyncio.sleep(0)
    assert started == [1, 2, 3, 4, 5]  # in part order, at once
    budget.resize(1)
    assert budget.in_flight == 5  # nothing in flight is stopped
    release.set()
    await asyncio.gather(*tasks)
    assert started == [1, 2, 3, 4, 5, 6]
    assert budget.in_flight == 0


def test_the_window_of_builds_follows_the_budget() -> None:
    budget = Budget(4)
    window = Window(100, budget, lookahead=2)
    assert window.limit == 8
    budget.resize(32)
    assert window.limit == 64
    budget.resize(64)
    assert window.limit == 100  # never past what the open files allow
    assert Window(16).limit == 16
