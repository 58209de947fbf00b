"""``ragagent eval`` over a small corpus: metrics, answers, targets and exit codes."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from service.config import Settings
from tests.commands.support import run
from tests.corpus.support import corpus_server, settings_for, write_pages

NODES = "module-01-foundations/chapter-01-ros2/page-01-nodes.md"
URDF = "module-01-foundations/chapter-02-urdf/page-01-urdf.md"
WHISPER = "module-02-perception/chapter-04-speech/page-01-whisper.md"

QUESTIONS: list[dict[str, object]] = [
    {
        "id": "ros2-middleware",
        "question": "Which middleware carries the messages between ROS 2 nodes?",
        "expected_paths": [NODES],
        "answer_keywords": ["DDS"],
    },
    {
        "id": "urdf-describes",
        "question": "What does a URDF file describe about a robot?",
        "expected_paths": [URDF],
        "answer_keywords": ["links", "joints"],
    },
    {
        "id": "speech-to-text",
        "question": "Which model turns spoken commands into text?",
        "expected_paths": [WHISPER],
        "answer_keywords": ["Whisper"],
    },
    {
        "id": "sourdough",
        "question": "What is a good recipe for sourdough bread?",
        "expected_paths": [],
        "answer_keywords": [],
    },
]


def _questions(path: Path, questions: list[dict[str, object]] = QUESTIONS) -> Path:
    path.write_text("\n".join(json.dumps(q) for q in questions) + "\n", encoding="utf-8")
    return path


@pytest.fixture
async def indexed(tmp_path: Path) -> Settings:
    """Settings whose data folder holds the small corpus (ingested by the ingest command)."""
    settings = settings_for(tmp_path / "data")
    result = await run(settings, "ingest", str(write_pages(tmp_path / "docs")), "--json")
    assert result.code == 0, result.err
    return settings


async def test_in_process_eval_scores_retrieval_and_rejection(
    indexed: Settings, tmp_path: Path
) -> None:
    questions = _questions(tmp_path / "questions.jsonl")
    result = await run(indexed, "eval", str(questions), "--json", "--min-recall", "0.9")
    assert (result.code, result.err) == (0, "")
    report = result.json()
    assert report["k"] == 5
    assert report["threshold"] == indexed.confidence_threshold
    assert (report["questions"], report["answerable"], report["unanswerable"]) == (4, 3, 1)
    assert report["recall_at_k"] == 1.0
    assert report["mrr"] == 1.0
    assert report["rejection_rate"] == 1.0
    assert report["keyword_accuracy"] is None  # no --answers
    assert report["missed_targets"] == []
    ranks = {r["id"]: r["first_relevant_rank"] for r in report["results"]}
    assert ranks == {
        "ros2-middleware": 1,
        "urdf-describes": 1,
        "speech-to-text": 1,
        "sourdough": None,
    }


async def test_threshold_zero_rejects_nothing(indexed: Settings, tmp_path: Path) -> None:
    questions = _questions(tmp_path / "questions.jsonl")
    result = await run(
        indexed, "eval", str(questions), "--json", "--threshold", "0", "--min-rejection", "0.5"
    )
    assert result.code == 1
    assert result.json()["rejection_rate"] == 0.0
    assert result.err == "ragagent: target missed: rejection 0.000 < target 0.500\n"


async def test_a_missed_recall_target_exits_1_and_says_which(
    indexed: Settings, tmp_path: Path
) -> None:
    wrong = [dict(q) for q in QUESTIONS]
    wrong[2]["expected_paths"] = ["intro.md"]  # a page that does not answer it
    questions = _questions(tmp_path / "wrong.jsonl", wrong)
    result = await run(
        indexed, "eval", str(questions), "--k", "1", "--min-recall", "0.9", "--min-mrr", "0.5"
    )
    assert result.code == 1
    assert result.err == "ragagent: target missed: recall@1 0.667 < target 0.900\n"
    assert "recall@1" in result.out  # the table is printed all the same
    assert "speech-to-text" in result.out


async def test_answers_through_a_server_report_keywords_and_no_answer(tmp_path: Path) -> None:
    questions = _questions(tmp_path / "questions.jsonl")
    async with corpus_server(tmp_path / "server") as srv:
        address = ("--address", srv.address)
        ingested = await run(srv.settings, "ingest", str(write_pages(tmp_path / "docs")), *address)
        assert ingested.code == 0
        result = await run(srv.settings, "eval", str(questions), *address, "--answers", "--json")
        table = await run(srv.settings, "eval", str(questions), *address, "--answers")
    assert result.code == 0, result.err
    report = result.json()
    assert report["recall_at_k"] == 1.0
    # The extractive strategy quotes the pages, so the keywords are in the answers.
    assert report["keyword_accuracy"] == 1.0
    assert report["no_answer_accuracy"] == 1.0  # sourdough: NO_ANSWER
    assert report["false_no_answer_rate"] == 0.0
    answers = {r["id"]: r["no_answer"] for r in report["results"]}
    assert answers == {
        "ros2-middleware": False,
        "urdf-describes": False,
        "speech-to-text": False,
        "sourdough": True,
    }
    assert "answer keywords" in table.out
    assert "NO_ANSWER" in table.out


async def test_targets_nobody_can_meet_are_missed(indexed: Settings, tmp_path: Path) -> None:
    questions = _questions(tmp_path / "answerable.jsonl", QUESTIONS[:3])
    result = await run(indexed, "eval", str(questions), "--json", "--min-rejection", "0.5")
    assert result.code == 1
    assert result.json()["rejection_rate"] is None
    assert "rejection: no question measures it" in result.err


async def test_bad_questions_files_and_servers(tmp_path: Path) -> None:
    settings = settings_for(tmp_path / "data")
    missing = await run(settings, "eval", str(tmp_path / "none.jsonl"))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "a"}\n', encoding="utf-8")
    malformed = await run(settings, "eval", str(broken))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    nothing = await run(settings, "eval", str(empty))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    questions = _questions(tmp_path / "questions.jsonl")
    unreachable = await run(settings, "eval", str(questions), "--address", f"127.0.0.1:{port}")
    assert (missing.code, malformed.code, nothing.code) == (2, 2, 2)
    assert "none.jsonl" in missing.err
    assert "broken.jsonl:1: missing fields" in malformed.err
    assert "no questions" in nothing.err
    assert unreachable.code == 1
    assert unreachable.err.startswith("ragagent: UNAVAILABLE: ")
    assert len(unreachable.err.splitlines()) == 1
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ("--k", "0"),
        ("--k", "21"),
        ("--threshold", "1.5"),
        ("--min-recall", "x"),
        ("--concurrency", "0"),
    ],
)
def test_out_of_range_options_are_usage_errors(argv: tuple[str, ...]) -> None:
    from tests.commands.support import parse

    with pytest.raises(SystemExit) as caught:
        parse("eval", "questions.jsonl", *argv)
    assert caught.value.code == 2


async def test_answers_are_scored_per_strategy(indexed: Settings, tmp_path: Path) -> None:
    questions = _questions(tmp_path / "questions.jsonl")
    result = await run(indexed, "eval", str(questions), "--strategies", "extractive", "--json")
    table = await run(indexed, "eval", str(questions), "--strategies", "extractive")
    assert result.code == 0, result.err
    report = result.json()
    [scores] = report["strategies"]
    assert scores["strategy"] == "extractive"
    assert scores["keyword_accuracy"] == report["keyword_accuracy"] == 1.0
    assert scores["keyword_coverage"] == report["keyword_coverage"] == 1.0
    assert scores["no_answer_accuracy"] == 1.0
    assert scores["failed"] == 0
    assert "answer keyword coverage" in table.out
    assert "  extractive" in table.out


async def test_strategies_a_run_cannot_have_are_refused(indexed: Settings, tmp_path: Path) -> None:
    questions = _questions(tmp_path / "questions.jsonl")
    no_model = await run(indexed, "eval", str(questions), "--strategies", "retrieve_first")
    remote = await run(
        indexed, "eval", str(questions), "--strategies", "extractive", "--address", "127.0.0.1:1"
    )
    assert no_model.code == 2
    assert "model" in no_model.err.lower()
    assert remote.code == 2
    assert "--strategies needs the server in this process" in remote.err
    from tests.commands.support import parse

    with pytest.raises(SystemExit):
        parse("eval", "questions.jsonl", "--strategies", "oracle")
