"""Blocking work runs on the runtime's one bounded executor, never on the event loop.

The executor's contract (results, errors, context, bounds, cancellation, shutdown), then each
component that blocks: the embedded store's calls, ingest chunking, and the runtime that
builds and closes the executor.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from service.config import Settings
from service.domain import Deadline
from service.errors import DeadlineExceeded
from service.executor import THREAD_NAME, BlockingExecutor
from service.ingest.chunker import Chunker
from service.ingest.loader import SourceDocument
from service.ingest.pipeline import Ingestor
from service.retrieval.qdrant_calls import QdrantCalls
from service.retrieval.qdrant_store import QdrantStore, open_qdrant_client
from tests.helpers import make_chunk
from tests.ingest.fakes import FakeEmbedder, MemoryStore, count_words

REQUEST = contextvars.ContextVar("REQUEST", default="")


@pytest.fixture
async def executor() -> AsyncIterator[BlockingExecutor]:
    pool = BlockingExecutor(2)
    yield pool
    await pool.shutdown()


def _thread_name() -> str:
    return threading.current_thread().name


async def test_work_runs_on_a_pool_thread_with_the_callers_context(
    executor: BlockingExecutor,
) -> None:
    REQUEST.set("req-1")
    name = await executor.run(_thread_name)
    assert name.startswith(THREAD_NAME)
    # Log lines written in the thread keep the request id.
    assert await executor.run(REQUEST.get) == "req-1"
    assert await executor.run(divmod, 7, 2) == (3, 1)


async def test_an_error_reaches_the_caller_unchanged(executor: BlockingExecutor) -> None:
    def fail() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        await executor.run(fail)


async def test_at_most_threads_jobs_run_at_once(executor: BlockingExecutor) -> None:
    running = peak = 0
    lock = threading.Lock()

    def job() -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)
        with lock:
            running -= 1

    await asyncio.gather(*(executor.run(job) for _ in range(6)))
    assert peak == 2


async def test_a_cancelled_caller_hears_at_once_and_queued_work_never_runs() -> None:
    pool = BlockingExecutor(1)
    release = threading.Event()
    ran: list[str] = []
    try:
        busy = asyncio.create_task(pool.run(release.wait, 5))
        queued = asyncio.create_task(pool.run(ran.append, "queued"))
        await asyncio.sleep(0.05)
        busy.cancel()
        queued.cancel()
        started = time.perf_counter()
        # Neither waits for the job that is still running: the cancellation is not swallowed.
        for task in (busy, queued):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert time.perf_counter() - started < 1
    finally:
        release.set()
        await pool.shutdown()
    assert ran == []


async def test_shutdown_waits_for_running_work_then_refuses_more() -> None:
    pool = BlockingExecutor(1)
    finished = threading.Event()

    def slow() -> None:
        time.sleep(0.2)
        finished.set()

    task = asyncio.create_task(pool.run(slow))
    await asyncio.sleep(0.05)
    await pool.shutdown()
    assert finished.is_set()
    await task
    with pytest.raises(RuntimeError):
        await pool.run(_thread_name)


async def test_the_embedded_stores_calls_run_on_the_executor(
    tmp_path: Path, executor: BlockingExecutor
) -> None:
    client = open_qdrant_client(url=None, api_key=None, path=tmp_path, timeout=5)
    threads: list[str] = []
    local: Any = client._client  # the embedded engine behind the async client
    for method in ("query_points", "upsert", "count", "scroll"):
        original = getattr(local, method)

        async def spy(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            threads.append(_thread_name())
            return await _original(*args, **kwargs)

        setattr(local, method, spy)
    store = QdrantStore(
        client, FakeEmbedder(), collection="docs", payload_indexes=False, executor=executor
    )
    await store.ensure_collection()
    chunk = make_chunk("a.md", "the robot walks")
    await store.replace_document("a.md", [chunk], [FakeEmbedder._vector(chunk.text)])
    assert await store.search("the robot walks", limit=1, threshold=0.0)
    assert await store.count() == (1, 1)
    await store.close()
    assert threads
    assert all(name.startswith(THREAD_NAME) for name in threads)


class _SlowEmbeddedClient:
    """An embedded client's shape: ``async def`` methods that block the calling thread."""

    def __init__(self) -> None:
        self.running = 0
        self.overlapped = False

    async def count(self, seconds: float) -> float:
        self.running += 1
        self.overlapped |= self.running > 1
        time.sleep(seconds)  # noqa: ASYNC251 (what the embedded client does: it blocks)
        self.running -= 1
        return seconds


async def test_a_deadline_frees_the_caller_and_the_next_call_waits_its_turn(
    executor: BlockingExecutor,
) -> None:
    client = _SlowEmbeddedClient()
    calls = QdrantCalls(client, timeout=5, executor=executor)  # type: ignore[arg-type]
    started = time.perf_counter()
    with pytest.raises(DeadlineExceeded):
        await calls.run(lambda: client.count(0.5), Deadline.after(0.1), "counting")
    assert time.perf_counter() - started < 0.4
    # The abandoned call still finishes first: the embedded engine is not thread-safe.
    assert await calls.run(lambda: client.count(0.01), None, "counting") == 0.01
    assert not client.overlapped


async def test_ingest_chunks_on_the_executor(executor: BlockingExecutor) -> None:
    threads: list[str] = []

    class SpyChunker(Chunker):
        def chunk(self, document: Any) -> Any:
            threads.append(_thread_name())
            return super().chunk(document)

    ingestor = Ingestor(
        FakeEmbedder(), MemoryStore(), chunker=SpyChunker(count_words), executor=executor
    )
    await ingestor.ingest([SourceDocument("a.md", "# A\n\nSome text about robots.")])
    assert threads
    assert all(name.startswith(THREAD_NAME) for name in threads)


async def test_the_runtime_owns_the_executor_and_shuts_it_down_last(tmp_path: Path) -> None:
    from service.runtime import Runtime

    settings = Settings(address="127.0.0.1:0", data_dir=tmp_path, blocking_threads=3)
    runtime = await Runtime.open(settings, embedder=FakeEmbedder())
    assert runtime.executor.threads == 3
    assert await runtime.store.count() == (0, 0)
    await runtime.close()  # the store closed on the executor, before the executor went
    with pytest.raises(RuntimeError):
        await runtime.executor.run(_thread_name)
