"""Queries that wait while a model call runs are embedded together in the next one; each
caller keeps its own deadline, cancellation and errors."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from service.domain import Deadline
from service.errors import DeadlineExceeded, ShuttingDown
from service.executor import BlockingExecutor
from service.retrieval.embedders import FastEmbedEmbedder
from service.retrieval.query_batches import QueryBatches
from tests.helpers import local_embedder


class ScriptedModel:
    """Records each call's texts; a call waits for ``release`` while ``hold`` is set."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.hold = False
        self.release = asyncio.Event()
        self.fail_next: BaseException | None = None
        self.called = asyncio.Event()

    async def __call__(self, texts: list[str]) -> Sequence[list[float]]:
        self.calls.append(list(texts))
        self.called.set()
        if self.hold:
            await self.release.wait()
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure
        return [[float(len(t))] for t in texts]


async def _started(model: ScriptedModel) -> None:
    """Once the first call has started (and holds, when the model is told to)."""
    await model.called.wait()


async def _held_first_call(
    **options: int,
) -> tuple[ScriptedModel, QueryBatches, asyncio.Task[list[float]]]:
    """A model told to hold, its batches, and the query "a" whose call has started."""
    model = ScriptedModel()
    model.hold = True
    batches = QueryBatches(model, **options)
    first = asyncio.create_task(batches.embed("a"))
    await _started(model)
    return model, batches, first


async def test_a_lone_query_is_embedded_at_once_without_waiting_for_company() -> None:
    model = ScriptedModel()
    batches = QueryBatches(model)
    assert await batches.embed("abc") == [3.0]
    assert model.calls == [["abc"]]


async def test_queries_that_arrive_during_a_call_share_the_next_one() -> None:
    model, batches, first = await _held_first_call()
    waiting = [asyncio.create_task(batches.embed(text)) for text in ("bb", "ccc", "bb")]
    await asyncio.sleep(0)
    model.release.set()
    assert await first == [1.0]
    assert [await task for task in waiting] == [[2.0], [3.0], [2.0]]
    assert model.calls == [["a"], ["bb", "ccc"]]  # the same text once per call


async def test_with_two_lanes_a_second_query_goes_at_once_and_later_ones_wait() -> None:
    model, batches, first = await _held_first_call(lanes=2)
    tasks = [first]
    model.called.clear()
    tasks.append(asyncio.create_task(batches.embed("bb")))
    await _started(model)  # the second lane, while the first call still runs
    assert model.calls == [["a"], ["bb"]]
    tasks += [asyncio.create_task(batches.embed(t)) for t in ("ccc", "dddd")]
    await asyncio.sleep(0)
    model.release.set()
    assert [await task for task in tasks] == [[1.0], [2.0], [3.0], [4.0]]
    assert model.calls[2:] == [["ccc", "dddd"]]  # the two that waited went together


async def test_a_call_holds_at_most_max_batch_queries() -> None:
    model, batches, first = await _held_first_call(max_batch=2)
    rest = [asyncio.create_task(batches.embed("x" * n)) for n in range(2, 7)]
    await asyncio.sleep(0)
    model.release.set()
    await asyncio.gather(first, *rest)
    assert [len(call) for call in model.calls] == [1, 2, 2, 1]


async def test_a_caller_whose_deadline_runs_out_leaves_the_others_their_vectors() -> None:
    model, batches, first = await _held_first_call()
    hurried = asyncio.create_task(batches.embed("bb", Deadline.after(0.01)))
    patient = asyncio.create_task(batches.embed("ccc", Deadline.after(30)))
    with pytest.raises(DeadlineExceeded, match="embedding"):
        await hurried
    model.release.set()
    assert await first == [1.0]
    assert await patient == [3.0]
    assert model.calls == [["a"], ["ccc"]]  # the caller that left is not embedded


async def test_a_cancelled_caller_does_not_cancel_the_call_the_others_wait_for() -> None:
    model = ScriptedModel()
    model.hold = True
    batches = QueryBatches(model)
    first = asyncio.create_task(batches.embed("a"))
    second = asyncio.create_task(batches.embed("a"))
    await _started(model)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    model.release.set()
    assert await second == [1.0]


async def test_a_failed_call_fails_each_of_its_queries_and_the_next_call_goes_on() -> None:
    model, batches, first = await _held_first_call()
    model.fail_next = RuntimeError("onnx failed")
    second = asyncio.create_task(batches.embed("bb"))
    await asyncio.sleep(0)
    model.release.set()
    with pytest.raises(RuntimeError, match="onnx failed"):
        await first
    assert await second == [2.0]


async def test_a_query_the_executor_drops_at_shutdown_is_reported_as_shutting_down() -> None:
    executor = BlockingExecutor(1)
    running, release = threading.Event(), threading.Event()

    def hold_the_thread() -> None:
        running.set()
        release.wait(10)

    busy = asyncio.create_task(executor.run(hold_the_thread))  # the one thread, taken
    submitted = asyncio.Event()

    async def embed_many(texts: list[str]) -> list[list[float]]:
        job = executor.run(lambda: [[0.0] for _ in texts])
        submitted.set()
        return await job

    batches = QueryBatches(embed_many)
    await asyncio.to_thread(running.wait, 10)
    queued = asyncio.create_task(batches.embed("a"))  # its call waits behind the held thread
    await submitted.wait()
    await asyncio.sleep(0)  # the call's job reaches the pool's queue
    stopping = asyncio.create_task(executor.shutdown())  # drops queued work first
    await asyncio.sleep(0)
    release.set()  # then the running work may finish
    await stopping
    await busy
    with pytest.raises(ShuttingDown, match="shutting down"):
        await queued


async def test_the_local_model_gives_the_same_vectors_batched_as_alone() -> None:
    model = local_embedder()  # skips where the model is not provisioned
    assert isinstance(model, FastEmbedEmbedder)
    executor = BlockingExecutor(1)
    embedder = model.using(executor)
    queries = [
        "How do ROS 2 nodes exchange messages?",
        "What does a URDF file describe?",
        "What does Gazebo simulate?",
        "Which middleware is underneath ROS 2?",
    ]
    try:
        alone = [await embedder.embed_query(q) for q in queries]
        together = await asyncio.gather(*(embedder.embed_query(q) for q in queries))
    finally:
        await executor.shutdown()
    np.testing.assert_allclose(np.array(together), np.array(alone), atol=1e-5)
