"""Evaluation metrics and the questions-file parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.evaluation import (
    EvalQuestion,
    GeneratedAnswer,
    QuestionsFileError,
    RetrievedDocument,
    evaluate,
    load_questions,
    parse_questions,
)


def q(qid: str, paths: tuple[str, ...] = (), keywords: tuple[str, ...] = ()) -> EvalQuestion:
    return EvalQuestion(qid, f"question {qid}?", paths, keywords)


QUESTIONS = [
    q("a", ("x.md",), ("gear",)),
    q("b", ("y.md", "z.md"), ("torque", "Nm")),
    q("c", ("w.md",), ("lidar",)),
    q("none-1"),
    q("none-2"),
]


def test_recall_and_mrr() -> None:
    report = evaluate(
        QUESTIONS,
        {
            "a": ["x.md", "q.md"],  # rank 1
            "b": ["q.md", "q.md", "r.md", "z.md"],  # duplicates collapse: z.md is rank 3
            "c": ["q.md", "r.md", "s.md", "t.md", "u.md", "w.md"],  # rank 6: beyond k
        },
        k=3,
    )
    assert report.recall_at_k == pytest.approx(2 / 3)
    assert report.mrr == pytest.approx((1 + 1 / 3 + 1 / 6) / 3)
    ranks = {r.id: r.first_relevant_rank for r in report.results}
    assert ranks == {"a": 1, "b": 3, "c": 6, "none-1": None, "none-2": None}
    assert (report.questions, report.answerable, report.unanswerable) == (5, 3, 2)


def test_missing_results_count_as_misses() -> None:
    report = evaluate(QUESTIONS, {})
    assert report.recall_at_k == 0.0
    assert report.mrr == 0.0
    assert report.rejection_rate == 1.0


def test_threshold_filters_results_and_decides_rejection() -> None:
    report = evaluate(
        QUESTIONS,
        {
            "a": [RetrievedDocument("q.md", 0.9), RetrievedDocument("x.md", 0.2)],
            "none-1": [RetrievedDocument("x.md", 0.3)],
            "none-2": [RetrievedDocument("x.md", 0.7)],
        },
        threshold=0.5,
    )
    result_a = next(r for r in report.results if r.id == "a")
    assert result_a.first_relevant_rank is None
    assert result_a.returned == 1
    assert report.rejection_rate == 0.5


def test_answer_keywords_and_no_answer() -> None:
    answers = {
        "a": GeneratedAnswer("Use a GEAR train."),  # case-insensitive match
        "b": GeneratedAnswer("The torque is 5."),  # misses "Nm"
        "c": GeneratedAnswer("", no_answer=True),  # declined an answerable question
        "none-1": GeneratedAnswer("", no_answer=True),
        "none-2": GeneratedAnswer("Here is something made up."),
    }
    report = evaluate(QUESTIONS, {}, answers=answers)
    assert report.keyword_accuracy == pytest.approx(1 / 3)
    assert report.no_answer_accuracy == 0.5
    assert report.false_no_answer_rate == pytest.approx(1 / 3)
    missing = {r.id: r.missing_keywords for r in report.results}
    assert missing["b"] == ("Nm",)


def test_rates_without_contributors_are_none() -> None:
    report = evaluate([q("only-unanswerable")], {})
    assert report.recall_at_k is None
    assert report.mrr is None
    assert report.keyword_accuracy is None
    assert report.no_answer_accuracy is None
    assert report.rejection_rate == 1.0


def test_unknown_ids_and_bad_k_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown question ids"):
        evaluate(QUESTIONS, {"zzz": []})
    with pytest.raises(ValueError, match="k must be"):
        evaluate(QUESTIONS, {}, k=0)


def test_report_serialises_and_renders() -> None:
    report = evaluate(
        QUESTIONS, {"a": ["x.md"]}, k=5, answers={"a": GeneratedAnswer("gear", False)}
    )
    data = report.to_dict()
    assert json.loads(json.dumps(data))["recall_at_k"] == pytest.approx(1 / 3)
    assert len(data["results"]) == 5
    table = report.render_table()
    assert "recall@5" in table
    assert "0.333" in table
    assert "n/a" in table  # no unanswerable answers were given
    lines = table.splitlines()
    assert any(line.startswith("a ") and "answerable" in line for line in lines)
    assert any(line.startswith("none-1") and "rejected" in line for line in lines)


# --- the questions file ---------------------------------------------------------------------


GOOD = {"id": "q1", "question": "What?", "expected_paths": ["a.md"], "answer_keywords": ["x"]}


def line(**changes: object) -> str:
    return json.dumps({**GOOD, **changes})


def test_parse_questions() -> None:
    lines = [line(), "", line(id="q2", expected_paths=[], answer_keywords=[])]
    questions = parse_questions(lines)
    assert [(x.id, x.answerable) for x in questions] == [("q1", True), ("q2", False)]
    assert questions[0].expected_paths == ("a.md",)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"id": "q"}), "missing fields"),
        (line(extra=1), "unknown fields"),
        (line(id=""), "id must not be empty"),
        (line(question=3), "question must be a str"),
        (line(expected_paths="a.md"), "expected_paths must be a list"),
        (line(answer_keywords=[""]), "non-empty strings"),
        (line(answer_keywords=[]), "needs answer_keywords"),
    ],
)
def test_bad_lines_name_the_line(bad: str, message: str) -> None:
    with pytest.raises(QuestionsFileError, match=rf"^q\.jsonl:2: .*{message}"):
        parse_questions([line(id="first"), bad], source="q.jsonl")


def test_duplicate_ids(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(f"{line()}\n{line()}\n", encoding="utf-8")
    with pytest.raises(QuestionsFileError, match=r"q\.jsonl:2: duplicate id 'q1'"):
        load_questions(path)
