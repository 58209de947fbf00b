"""A document over its CPU budget fails alone, named; cancelled work stops its thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from service.errors import InvalidArgument
from service.executor import BlockingExecutor
from service.ingest import budget
from service.ingest.loader import SourceDocument
from service.ingest.pipeline import Ingestor
from tests.ingest.fakes import FakeEmbedder, MemoryStore


async def test_a_document_over_its_budget_fails_by_name_and_the_ones_before_stay() -> None:
    store = MemoryStore()
    ingestor = Ingestor(FakeEmbedder(), store, document_cpu_seconds=0.001)
    # Parsing any page of 2 MB takes far more than a millisecond of CPU.
    documents = [
        SourceDocument("good.md", "# Good\n\nA small page."),
        SourceDocument("bad.md", "[" * 2_000_000),
        SourceDocument("after.md", "# After\n\nNever reached."),
    ]
    small = Ingestor(FakeEmbedder(), store)
    await small.ingest(documents[:1])
    with pytest.raises(InvalidArgument) as raised:
        await ingestor.ingest(documents)
    (violation,) = raised.value.violations
    assert violation.field == "document.content"
    assert "'bad.md' was not indexed" in violation.description
    assert "CPU budget" in violation.description
    assert store.chunks_of("good.md")
    assert not store.chunks_of("bad.md")
    assert not store.chunks_of("after.md")


def test_check_raises_only_inside_an_active_budget() -> None:
    budget.check()  # no budget on this thread: nothing to stop
    work = budget.WorkBudget(0)
    with budget.active(work):
        budget.check()
        work.cancel()
        with pytest.raises(budget.WorkCancelled):
            budget.check()
    budget.check()


async def test_cancelling_the_ingest_stops_the_parse_in_its_thread() -> None:
    executor = BlockingExecutor(1)
    try:
        ingestor = Ingestor(FakeEmbedder(), MemoryStore(), executor=executor)
        started = threading.Event()
        real_prepare = ingestor.prepare

        def prepare(document: SourceDocument, **options: Any) -> object:
            started.set()
            return real_prepare(document, **options)

        ingestor.prepare = prepare  # type: ignore[method-assign,assignment]
        # Unbounded budget: only the cancellation can stop this 2 MB page early.
        task = asyncio.create_task(ingestor.ingest([SourceDocument("x.md", "[" * 2_000_000)]))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The pool's one thread is free again once the parse noticed the cancellation;
        # without it, this waited for the whole page to be chunked.
        await executor.run(lambda: None)
    finally:
        await executor.shutdown()
