"""Retrieval quality on the real textbook: 108 evaluation questions, 48 unanswerable (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.commands.conftest import IndexedBook
from tests.commands.support import run

pytestmark = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.timeout(900)]

QUESTIONS = Path(__file__).resolve().parents[1] / "eval" / "questions.jsonl"


def test_the_book_ingests_once_and_reingests_as_unchanged(indexed_book: IndexedBook) -> None:
    first, second = indexed_book.first.to_dict(), indexed_book.second.to_dict()
    print(f"\ningest: {first}\nre-ingest: {second}")
    assert first["added"] == 40
    assert first["chunks_written"] > 40
    assert (second["unchanged"], second["added"], second["updated"]) == (40, 0, 0)
    assert second["chunks_written"] == 0
    assert second["duration_s"] < first["duration_s"] / 10


async def test_recall_and_mrr_on_the_book(indexed_book: IndexedBook) -> None:
    settings = indexed_book.settings
    targets = ("--min-recall", "0.90", "--min-mrr", "0.75")
    table = await run(settings, "eval", str(QUESTIONS), *targets)
    print("\n" + table.out + table.err)
    result = await run(settings, "eval", str(QUESTIONS), "--json")
    report = result.json()
    assert report["questions"] == 108
    assert report["recall_at_k"] >= 0.90
    assert report["mrr"] >= 0.75
    assert table.code == 0, table.err
