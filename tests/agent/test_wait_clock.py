"""WaitClock, the bound on each wait for a model stream's next chunk (issue 15: one timer
for the stream instead of a timeout object per chunk). The stall and deadline behaviour of
whole streams is held in test_faults.py and test_endpoint_behaviour.py; these are the
clock's own promises, including the ones a stream cannot show: the caller's cancellation
always wins, and chunks coming in time set no timer each."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from service.agent.wait_clock import WaitClock


async def bounded_sleep(clock: WaitClock, bound: float, seconds: float) -> bool:
    """Sleeps as a stream read waits, under ``clock``; True when the clock cut it short
    (its CancelledError taken as model.py takes it), False when the sleep ended."""
    clock.begin(bound)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if not clock.end():
            raise
        return True
    return clock.end()


async def test_a_wait_past_its_bound_is_cut_and_said_to_be() -> None:
    clock = WaitClock()
    assert await bounded_sleep(clock, 0.02, 5)
    clock.close()
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0  # the clock's cancellation is withdrawn
    await asyncio.sleep(0)  # and nothing is left to cancel the task later


async def test_waits_in_time_are_never_cut_and_share_one_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    timers: list[float] = []
    call_at = loop.call_at

    def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        if getattr(callback, "__self__", None) is clock:
            timers.append(when)
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting)
    clock = WaitClock()
    started = loop.time()
    for _ in range(200):
        assert not await bounded_sleep(clock, 0.05, 0.001)
    clock.close()
    # 200 waits of about 1 ms under a 50 ms bound: a timer every ~50 ms, not one per wait.
    periods = (loop.time() - started) / 0.05
    assert 1 <= len(timers) <= periods + 2 < 200, (len(timers), periods)


async def test_a_shorter_bound_than_the_timer_is_kept() -> None:
    clock = WaitClock()
    clock.begin(10.0)
    clock.end()
    # Sooner than the timer set for the first wait.
    assert await bounded_sleep(clock, 0.02, 5)
    clock.close()


async def test_between_waits_the_task_is_never_cancelled() -> None:
    clock = WaitClock()
    clock.begin(0.01)
    clock.end()
    await asyncio.sleep(0.05)  # the consumer's time: not bounded by the clock
    assert not await bounded_sleep(clock, 0.5, 0.001)
    clock.close()


async def _reader(bound: float, cut: list[bool]) -> None:
    """Waits 5 s under a clock of ``bound`` s; records whether the clock cut the wait."""
    clock = WaitClock()
    clock.begin(bound)
    try:
        await asyncio.sleep(5)
    finally:
        cut.append(clock.end())
        clock.close()


async def test_the_callers_cancellation_is_not_taken_for_the_clocks() -> None:
    cut: list[bool] = []
    task = asyncio.create_task(_reader(5.0, cut))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cut == [False]


async def test_a_cancellation_during_a_cut_wait_stays_a_cancellation() -> None:
    cut: list[bool] = []
    task = asyncio.create_task(_reader(0.0, cut))
    await asyncio.sleep(0)  # the reader waits
    await asyncio.sleep(0)  # the clock fires
    task.cancel()  # and the caller cancels before the reader runs again
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cut == [False]
