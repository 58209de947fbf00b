"""The permission-filter benchmark still runs (it is not part of `make test` otherwise, and
an API change once broke it unnoticed): one pass at the book's size, which also checks that
the filtered search returns k readable chunks."""

from __future__ import annotations

from pathlib import Path

from service.executor import BlockingExecutor
from tests.bench import bench_access


async def test_the_access_benchmark_runs_at_the_books_size(tmp_path: Path) -> None:
    executor = BlockingExecutor(1)
    try:
        figures = await bench_access.one_size(bench_access.BOOK_CHUNKS, tmp_path, executor)
    finally:
        await executor.shutdown()
    assert set(figures) == {"none", "three", "rare"}
    assert all(value > 0 for value in figures.values())
