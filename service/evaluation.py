"""Retrieval and answer quality over a file of test questions; pure functions, no I/O but
reading the questions file.

Retrieval is scored per document: a question is answered by one or more pages
(``expected_paths``), and several chunks of the same page count as one result at the rank
of its best chunk. Questions with no expected page are "unanswerable": for them, the right
outcome is that nothing clears the relevance threshold, and that the agent says it has no
answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_FIELDS = {"id": str, "question": str, "expected_paths": list, "answer_keywords": list}


class QuestionsFileError(ValueError):
    """The questions file is malformed; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class EvalQuestion:
    """One test question and what a correct answer looks like."""

    id: str
    question: str
    expected_paths: tuple[str, ...]
    answer_keywords: tuple[str, ...]

    @property
    def answerable(self) -> bool:
        return bool(self.expected_paths)


@dataclass(frozen=True, slots=True)
class RetrievedDocument:
    """One search result, reduced to its document and score."""

    document_id: str
    score: float = 1.0


@dataclass(frozen=True, slots=True)
class GeneratedAnswer:
    """The agent's answer to a question; ``no_answer`` when it declined to answer."""

    text: str
    no_answer: bool = False
    # The call failed ("DEADLINE_EXCEEDED: ..."): scored as a failure, never skipped.
    error: str = ""
    # The strategy the server reports it ran ("extractive", "retrieve_first", "agentic").
    strategy: str = ""


@dataclass(frozen=True, slots=True)
class QuestionResult:
    """How one question fared. Answer fields are None when no answer was given."""

    id: str
    answerable: bool
    returned: int
    first_relevant_rank: int | None
    hit_at_k: bool
    keywords_ok: bool | None = None
    missing_keywords: tuple[str, ...] = ()
    no_answer: bool | None = None
    error: str = ""


@dataclass(frozen=True, slots=True)
class AnswerScores:
    """How one strategy's answers fared; rates as in :class:`EvaluationReport`."""

    strategy: str
    keyword_accuracy: float | None
    keyword_coverage: float | None
    no_answer_accuracy: float | None
    false_no_answer_rate: float | None
    failed: int


@dataclass(frozen=True, slots=True)
class EvaluationReport:
    """Aggregate scores; a rate is None when no question could contribute to it."""

    k: int
    threshold: float
    questions: int
    answerable: int
    unanswerable: int
    recall_at_k: float | None
    mrr: float | None
    rejection_rate: float | None
    keyword_accuracy: float | None
    no_answer_accuracy: float | None
    false_no_answer_rate: float | None
    results: tuple[QuestionResult, ...]
    # Questions whose call failed; each is scored as a failure (no keywords, no NO_ANSWER).
    failed: int = 0
    # The mean share of its expected keywords an answer holds (NO_ANSWER or failed: none).
    keyword_coverage: float | None = None
    # The answers of each strategy asked (the first is the one ``results`` shows).
    strategies: tuple[AnswerScores, ...] = ()

    def answer_scores(self, strategy: str) -> AnswerScores:
        """This report's answer rates, under the name of the strategy that gave them."""
        return AnswerScores(
            strategy,
            self.keyword_accuracy,
            self.keyword_coverage,
            self.no_answer_accuracy,
            self.false_no_answer_rate,
            self.failed,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render_table(self) -> str:
        """A plain-text summary followed by one row per question."""
        rows = [
            ("questions", f"{self.questions} ({self.answerable} answerable)"),
            (f"recall@{self.k}", _fmt(self.recall_at_k)),
            ("MRR", _fmt(self.mrr)),
            (f"rejected (< {self.threshold:g})", _fmt(self.rejection_rate)),
            ("answer keywords", _fmt(self.keyword_accuracy)),
            ("answer keyword coverage", _fmt(self.keyword_coverage)),
            ("NO_ANSWER when unanswerable", _fmt(self.no_answer_accuracy)),
            ("NO_ANSWER when answerable", _fmt(self.false_no_answer_rate)),
            ("failed calls (scored as failures)", str(self.failed)),
        ]
        for scores in self.strategies:
            rows.append(
                (
                    f"  {scores.strategy}",
                    f"keywords {_fmt(scores.keyword_accuracy)}, coverage "
                    f"{_fmt(scores.keyword_coverage)}, NO_ANSWER when unanswerable "
                    f"{_fmt(scores.no_answer_accuracy)} / answerable "
                    f"{_fmt(scores.false_no_answer_rate)}, failed {scores.failed}",
                )
            )
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows]
        header = ("id", "kind", "rank", "hit", "returned", "answer")
        table = [header] + [_result_row(r) for r in self.results]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines.append("")
        for row in table:
            cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _result_row(result: QuestionResult) -> tuple[str, ...]:
    if result.error:
        answer = "FAILED " + result.error.split(":", 1)[0]
    elif result.no_answer is None:
        answer = "-"
    elif not result.answerable:
        answer = "NO_ANSWER" if result.no_answer else "answered (wrong)"
    elif result.no_answer:
        answer = "NO_ANSWER (wrong)"
    else:
        answer = "ok" if result.keywords_ok else "missing " + ", ".join(result.missing_keywords)
    if result.answerable:
        kind, hit = "answerable", "yes" if result.hit_at_k else "no"
    else:
        kind, hit = "unanswerable", "rejected" if result.returned == 0 else "returned"
    rank = "-" if result.first_relevant_rank is None else str(result.first_relevant_rank)
    return (result.id, kind, rank, hit, str(result.returned), answer)


def load_questions(path: Path) -> list[EvalQuestion]:
    """Reads a questions JSONL file (blank lines allowed)."""
    with path.open(encoding="utf-8") as handle:
        return parse_questions(handle, source=str(path))


def parse_questions(lines: Iterable[str], *, source: str = "<questions>") -> list[EvalQuestion]:
    """Validates and parses JSONL lines; the first problem raises :class:`QuestionsFileError`."""
    questions: list[EvalQuestion] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        question = _parse_line(line, where)
        if question.id in seen:
            raise QuestionsFileError(f"{where}: duplicate id {question.id!r}")
        seen.add(question.id)
        questions.append(question)
    return questions


def _parse_line(line: str, where: str) -> EvalQuestion:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise QuestionsFileError(f"{where}: not valid JSON: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise QuestionsFileError(f"{where}: expected a JSON object")
    unknown = sorted(set(data) - set(_FIELDS))
    missing = sorted(set(_FIELDS) - set(data))
    if unknown or missing:
        raise QuestionsFileError(f"{where}: missing fields {missing}, unknown fields {unknown}")
    for name, kind in _FIELDS.items():
        if not isinstance(data[name], kind):
            raise QuestionsFileError(f"{where}: {name} must be a {kind.__name__}")
    for name in ("id", "question"):
        if not data[name].strip():
            raise QuestionsFileError(f"{where}: {name} must not be empty")
    for name in ("expected_paths", "answer_keywords"):
        if not all(isinstance(item, str) and item.strip() for item in data[name]):
            raise QuestionsFileError(f"{where}: {name} must hold non-empty strings")
    if data["expected_paths"] and not data["answer_keywords"]:
        raise QuestionsFileError(f"{where}: an answerable question needs answer_keywords")
    return EvalQuestion(
        id=data["id"].strip(),
        question=data["question"].strip(),
        expected_paths=tuple(data["expected_paths"]),
        answer_keywords=tuple(data["answer_keywords"]),
    )


def evaluate(
    questions: Sequence[EvalQuestion],
    retrieved: Mapping[str, Sequence[str | RetrievedDocument]],
    *,
    k: int = 5,
    threshold: float = 0.0,
    answers: Mapping[str, GeneratedAnswer] | None = None,
) -> EvaluationReport:
    """Scores ranked results (and optionally answers) against the questions.

    ``retrieved`` maps a question id to its results, best first; a missing id means nothing
    was returned. Results scoring below ``threshold`` do not count as returned.
    """
    if k < 1:
        raise ValueError("k must be at least 1")
    known = {q.id for q in questions}
    stray = sorted(set(retrieved) - known) + sorted(set(answers or {}) - known)
    if stray:
        raise ValueError(f"results for unknown question ids: {stray}")
    results = [
        _score(q, retrieved.get(q.id, ()), k, threshold, (answers or {}).get(q.id))
        for q in questions
    ]
    by_id = {q.id: q for q in questions}
    answerable = [r for r in results if r.answerable]
    unanswerable = [r for r in results if not r.answerable]
    answered = [r for r in answerable if r.no_answer is not None]
    return EvaluationReport(
        k=k,
        threshold=threshold,
        questions=len(results),
        answerable=len(answerable),
        unanswerable=len(unanswerable),
        recall_at_k=_mean([r.hit_at_k for r in answerable]),
        mrr=_mean(
            [1.0 / r.first_relevant_rank if r.first_relevant_rank else 0.0 for r in answerable]
        ),
        rejection_rate=_mean([r.returned == 0 for r in unanswerable]),
        keyword_accuracy=_mean([bool(r.keywords_ok) for r in answered]),
        no_answer_accuracy=_mean(
            [bool(r.no_answer) for r in unanswerable if r.no_answer is not None]
        ),
        false_no_answer_rate=_mean([bool(r.no_answer) for r in answered]),
        results=tuple(results),
        failed=sum(1 for r in results if r.error),
        keyword_coverage=_mean([_coverage(r, by_id[r.id]) for r in answered]),
    )


def _coverage(result: QuestionResult, question: EvalQuestion) -> float:
    if result.no_answer or result.error:
        return 0.0
    found = len(question.answer_keywords) - len(result.missing_keywords)
    return found / len(question.answer_keywords)


def _score(
    question: EvalQuestion,
    hits: Sequence[str | RetrievedDocument],
    k: int,
    threshold: float,
    answer: GeneratedAnswer | None,
) -> QuestionResult:
    ranked: list[str] = []
    for hit in hits:
        doc = hit if isinstance(hit, RetrievedDocument) else RetrievedDocument(hit)
        if doc.score >= threshold and doc.document_id not in ranked:
            ranked.append(doc.document_id)
    expected = set(question.expected_paths)
    rank = next((i for i, doc in enumerate(ranked, start=1) if doc in expected), None)
    missing: tuple[str, ...] = ()
    keywords_ok: bool | None = None
    if answer is not None and question.answerable:
        text = answer.text.casefold()
        missing = tuple(w for w in question.answer_keywords if w.casefold() not in text)
        keywords_ok = not answer.no_answer and not missing and not answer.error
    return QuestionResult(
        id=question.id,
        answerable=question.answerable,
        returned=len(ranked),
        first_relevant_rank=rank,
        hit_at_k=rank is not None and rank <= k,
        keywords_ok=keywords_ok,
        missing_keywords=missing,
        no_answer=None if answer is None else answer.no_answer,
        error="" if answer is None else answer.error,
    )


def _mean(values: Sequence[bool | float]) -> float | None:
    return sum(float(v) for v in values) / len(values) if values else None
