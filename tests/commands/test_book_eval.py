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


# The default method's figures on the question sets it was judged on (docs/evaluation.md,
# 2026-11-23), less one question's worth: a change of the method that loses more on any of
# them shows here. (recall@5, MRR, rejection) as measured.
READ_SETS = {
    "questions.jsonl": (0.967, 0.904, 1.000),
    "heldout.jsonl": (1.000, 0.902, 0.966),
    "heldout2.jsonl": (0.967, 0.922, 0.933),
    "heldout3.jsonl": (0.967, 0.950, 0.933),
    "heldout4.jsonl": (0.967, 0.900, 0.867),
    "heldout5.jsonl": (0.833, 0.683, 0.733),
    "heldout6.jsonl": (0.833, 0.817, 0.833),
}


@pytest.mark.parametrize("name", sorted(READ_SETS))
async def test_the_read_question_sets_keep_their_figures(
    indexed_book: IndexedBook, name: str
) -> None:
    result = await run(indexed_book.settings, "eval", str(QUESTIONS.with_name(name)), "--json")
    report = result.json()
    recall, mrr, rejection = READ_SETS[name]
    one_answerable = 1 / report["answerable"] + 1e-9
    one_unanswerable = 1 / report["unanswerable"] + 1e-9
    figures = (report["recall_at_k"], report["mrr"], report["rejection_rate"])
    print(f"\n{name}: recall@5 / MRR / rejected = {figures}")
    assert report["recall_at_k"] >= recall - one_answerable
    assert report["mrr"] >= mrr - 0.05
    assert report["rejection_rate"] >= rejection - one_unanswerable
