"""The pool's slots (asyncclient._client._slots): taken at once when free, handed in turn to the
longest waiter, never lost to a cancellation."""

import asyncio

import pytest

from asyncclient._client._slots import Slots


def test_free_slots_are_taken_at_once_until_none_is_left() -> None:
    slots = Slots(2)
    assert slots.take_now()
    assert slots.take_now()
    assert not slots.take_now()
    assert slots.free == 0
    slots.give()
    assert slots.free == 1


async def test_a_slot_given_back_goes_to_the_longest_waiter_not_to_a_newcomer() -> None:
    slots = Slots(1)
    assert slots.take_now()
    order: list[str] = []

    async def waiter(name: str) -> None:
        await slots.take()
        order.append(name)

    first = asyncio.create_task(waiter("first"))
    second = asyncio.create_task(waiter("second"))
    await asyncio.sleep(0)
    slots.give()  # handed to "first": a newcomer finds none free
    assert not slots.take_now()
    await first
    slots.give()
    await second
    slots.give()
    assert order == ["first", "second"]
    assert slots.free == 1


async def test_a_waiter_cancelled_in_the_queue_leaves_it_and_takes_nothing() -> None:
    slots = Slots(1)
    assert slots.take_now()
    task = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    slots.give()
    assert slots.free == 1


async def test_a_waiter_cancelled_after_being_handed_a_slot_passes_it_on() -> None:
    slots = Slots(1)
    assert slots.take_now()
    handed = asyncio.create_task(slots.take())
    behind = asyncio.create_task(slots.take())
    await asyncio.sleep(0)
    slots.give()  # the first waiter's future is done ...
    handed.cancel()  # ... but it is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await handed
    await asyncio.wait_for(behind, 5)  # the slot went on to the next waiter
    assert slots.free == 0
    slots.give()
    assert slots.free == 1


async def test_within_a_timeout_no_slot_is_lost_whichever_way_it_ends() -> None:
    slots = Slots(3)
    held = 0

    async def user(index: int) -> None:
        nonlocal held
        try:
            async with asyncio.timeout(0 if index % 3 == 0 else None):
                await slots.take()
        except TimeoutError:
            return
        held += 1
        assert held <= 3
        await asyncio.sleep(0)
        held -= 1
        slots.give()

    await asyncio.gather(*(user(i) for i in range(60)))
    assert slots.free == 3
