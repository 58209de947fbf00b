"""The relay between a run's task and its consumer: bounded, one heartbeat timer per stream."""

from __future__ import annotations

import asyncio

from service.agent.relay import BEAT, ENDED, Relay


async def test_items_come_in_order_without_heartbeats_while_they_flow() -> None:
    relay: Relay[int] = Relay(0.2)

    async def produce() -> None:
        for i in range(20):
            await relay.put(i)
            await asyncio.sleep(0.02)

    producer = asyncio.create_task(produce())
    relay.watch(producer)
    got = [await relay.get() for _ in range(20)]
    relay.close()
    await producer
    assert got == list(range(20))


async def test_silence_is_reported_once_per_interval_of_waiting() -> None:
    loop = asyncio.get_running_loop()
    relay: Relay[str] = Relay(0.1)

    async def produce() -> None:
        await asyncio.sleep(0.35)
        await relay.put("late")

    producer = asyncio.create_task(produce())
    relay.watch(producer)
    started = loop.time()
    got, at = [], []
    while not got or got[-1] != "late":
        got.append(await relay.get())
        at.append(loop.time() - started)
    relay.close()
    await producer
    assert got[:-1] == [BEAT] * (len(got) - 1)
    assert 2 <= len(got) - 1 <= 4
    assert all(b - a >= 0.09 for a, b in zip([0.0, *at], at[:-1], strict=False))


async def test_no_heartbeat_counts_time_the_consumer_spent_elsewhere() -> None:
    relay: Relay[int] = Relay(0.1)
    await relay.put(1)
    await asyncio.sleep(0.3)  # the consumer is busy sending, not waiting
    await relay.put(2)
    assert [await relay.get(), await relay.get()] == [1, 2]
    relay.close()


async def test_a_producer_that_ends_without_a_last_item_is_reported() -> None:
    relay: Relay[int] = Relay(0.05)

    async def crash() -> None:
        raise RuntimeError("boom")

    producer = asyncio.create_task(crash())
    relay.watch(producer)
    assert await relay.get() is ENDED
    relay.close()
    assert isinstance(producer.exception(), RuntimeError)


async def test_a_full_relay_holds_the_producer_back() -> None:
    relay: Relay[int] = Relay(30.0, size=2)
    await relay.put(1)
    await relay.put(2)
    third = asyncio.create_task(relay.put(3))
    await asyncio.sleep(0.05)
    assert not third.done()
    assert await relay.get() == 1
    await asyncio.wait_for(third, 1)
    assert [await relay.get(), await relay.get()] == [2, 3]
    relay.close()


async def test_a_held_producer_resumes_once_the_relay_is_down_to_half() -> None:
    relay: Relay[int] = Relay(30.0, size=4)
    for i in range(4):
        await relay.put(i)
    fifth = asyncio.create_task(relay.put(4))
    await asyncio.sleep(0.01)
    assert await relay.get() == 0
    await asyncio.sleep(0.01)
    assert not fifth.done(), "three left: refilling one at a time would cost a turn each"
    assert await relay.get() == 1
    await asyncio.wait_for(fifth, 1)
    assert [await relay.get() for _ in range(3)] == [2, 3, 4]
    relay.close()


async def test_take_while_takes_the_queued_items_from_the_front_as_long_as_accepted() -> None:
    relay: Relay[int] = Relay(30.0)
    assert relay.take_while(lambda item: True) == [], "an empty relay: nothing, no wait"
    for i in (2, 4, 5, 6):
        await relay.put(i)
    assert relay.take_while(lambda item: isinstance(item, int) and item % 2 == 0) == [2, 4]
    assert await relay.get() == 5, "the first item not accepted stays first"
    assert relay.take_while(lambda item: False) == []
    assert await relay.get() == 6
    relay.close()


async def test_take_while_frees_a_held_producer_like_get() -> None:
    relay: Relay[int] = Relay(30.0, size=4)
    for i in range(4):
        await relay.put(i)
    fifth = asyncio.create_task(relay.put(4))
    await asyncio.sleep(0.01)
    assert not fifth.done()
    assert relay.take_while(lambda item: True) == [0, 1, 2, 3]
    await asyncio.wait_for(fifth, 1)
    assert await relay.get() == 4
    relay.close()
