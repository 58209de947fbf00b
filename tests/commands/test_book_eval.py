"""Retrieval quality on the real textbook, over the project's own question sets (slow)."""

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


# The project's own question sets are development data, not gates: a method change is
# judged by whether it generalises (docs/retrieval.md), so CI holds one floor over all of
# them together, pooled by question, with a tolerance of a few questions either way, and
# no set is pinned to its figures. Measured 2026-11-26 with the defaults (pooled over 227
# answerable and 227 unanswerable questions): recall@5 0.978, MRR 0.905, rejected
# 0.436 (99 of 227: no retrieval score separates the near misses, see docs/retrieval.md).
QUESTION_SETS = sorted(QUESTIONS.parent.glob("*.jsonl"))
POOLED = {"recall_at_k": (0.978, 0.02), "mrr": (0.905, 0.03), "rejection_rate": (0.436, 0.05)}


async def test_the_project_question_sets_together_hold_one_floor(
    indexed_book: IndexedBook,
) -> None:
    answerable = unanswerable = 0
    sums = dict.fromkeys(POOLED, 0.0)
    for path in QUESTION_SETS:
        report = (await run(indexed_book.settings, "eval", str(path), "--json")).json()
        answerable += report["answerable"]
        unanswerable += report["unanswerable"]
        sums["recall_at_k"] += report["recall_at_k"] * report["answerable"]
        sums["mrr"] += report["mrr"] * report["answerable"]
        sums["rejection_rate"] += report["rejection_rate"] * report["unanswerable"]
    pooled = {
        "recall_at_k": sums["recall_at_k"] / answerable,
        "mrr": sums["mrr"] / answerable,
        "rejection_rate": sums["rejection_rate"] / unanswerable,
    }
    print(f"\n{len(QUESTION_SETS)} sets, {answerable} answerable, pooled: {pooled}")
    for name, (measured, tolerance) in POOLED.items():
        assert pooled[name] >= measured - tolerance, (name, pooled[name])
