"""The chat widget (web/) in a real browser: Debian's chromium, headless, driven by
playwright-core (tests/browser/drive_chat.mjs), against ``ragagent serve`` with the widget
served by its HTTP listener (RAGAGENT_HTTP_WEB).

Over the extractive strategy and over the scripted model (the endless fake model process),
two questions are asked in one session; the answer must grow on screen while it streams, its
citations must link to the pages the cited passages come from, and a call the server refuses
(keys on, the page has none) must say so in words. Each run leaves a screenshot in
.cache/artifacts/browser/ (RAGAGENT_TEST_ARTIFACTS overrides the folder).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc, session_pb2, session_pb2_grpc

from tests.processes import REPO, SMALL_CORPUS, free_port, model_process, server_process
from tests.security.support import new_key

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
DRIVER = Path(__file__).with_name("drive_chat.mjs")
ARTIFACTS = Path(os.environ.get("RAGAGENT_TEST_ARTIFACTS", REPO / ".cache" / "artifacts"))
BOOK = "https://book.example/"
QUESTIONS = ("What does URDF describe?", "Which middleware is underneath ROS 2?")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _requirements() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (apt-get install nodejs npm)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    if not (REPO / "web" / "node_modules" / "playwright-core").is_dir():
        return "web/node_modules is missing: run `make web` (npm ci)"
    if not (REPO / "web" / "dist" / "index.html").is_file():
        return "web/dist is missing: run `make web`"
    return None


@pytest.fixture(autouse=True)
def _browser_available() -> None:
    missing = _requirements()
    if missing:
        pytest.skip(missing)


def _ingest_book(target: str) -> dict[str, str]:
    """SMALL_CORPUS as pages of BOOK; returns document id -> page URL."""
    requests = [corpus_pb2.IngestDocumentsRequest(options=corpus_pb2.IngestOptions(base_url=BOOK))]
    requests += [
        corpus_pb2.IngestDocumentsRequest(document=corpus_pb2.Document(path=p, content=c))
        for p, c in SMALL_CORPUS.items()
    ]
    with grpc.insecure_channel(target) as channel:
        corpus = corpus_pb2_grpc.CorpusServiceStub(channel)
        corpus.IngestDocuments(iter(requests), timeout=120)
        listed = corpus.ListDocuments(corpus_pb2.ListDocumentsRequest(), timeout=30)
    return {d.document_id: d.url for d in listed.documents}


def _drive(url: str, name: str, *questions: str) -> dict[str, Any]:
    ARTIFACTS.joinpath("browser").mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "browser" / f"{name}.png"
    done = subprocess.run(
        ["node", str(DRIVER), url, str(screenshot), *questions],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "CHROMIUM": str(CHROMIUM)},
    )
    assert done.returncode == 0, f"the browser run failed:\n{done.stderr[-3000:]}"
    assert screenshot.stat().st_size > 0
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _session_turns(target: str, session_id: str) -> int:
    with grpc.insecure_channel(target) as channel:
        reply = session_pb2_grpc.SessionServiceStub(channel).GetSession(
            session_pb2.GetSessionRequest(session_id=session_id), timeout=30
        )
    return len(reply.session.turns)


def _check_session_and_citations(
    result: dict[str, Any], pages: dict[str, str], target: str
) -> None:
    first, second = result["turns"]
    assert not first["error"], first
    assert not second["error"], second
    # The first question is about the URDF page: its citation links there, by number.
    assert first["citations"], first
    assert {c["href"] for c in first["citations"]} == {pages["m1/urdf.md"]}
    assert all(c["text"].startswith("[") for c in first["citations"])
    assert pages["m1/urdf.md"] in first["sources"]
    assert pages["m1/ros2.md"] in {c["href"] for c in second["citations"]}
    assert any("Searched the book" in row for row in first["tools"])
    # One session across both questions, kept by the page and by the server.
    sessions = result["sessions"]
    assert sessions[0]
    assert sessions[0] == sessions[1]
    assert _session_turns(target, sessions[0]) == 2
    assert not [line for line in result["console"] if line.startswith(("error", "pageerror"))]


def test_extractive_answers_stream_into_the_page_with_linked_citations(tmp_path: Path) -> None:
    port = free_port()
    with server_process(
        tmp_path, http_address=f"127.0.0.1:{port}", http_web="true", agent_strategy="extractive"
    ) as server:
        pages = _ingest_book(server.target)
        result = _drive(f"http://127.0.0.1:{port}/", "chat-extractive", *QUESTIONS)
        _check_session_and_citations(result, pages, server.target)
    assert "URDF" in result["turns"][0]["answer"]


def test_the_scripted_model_answer_grows_on_screen_while_it_streams(tmp_path: Path) -> None:
    port = free_port()
    with (
        model_process(deltas=30, interval=0.03) as model,
        server_process(
            tmp_path,
            http_address=f"127.0.0.1:{port}",
            http_web="true",
            agent_strategy="agentic",
            llm_base_url=model.base_url,
            llm_api_key="test",
            llm_model="fake-model",
        ) as server,
    ):
        pages = _ingest_book(server.target)
        result = _drive(f"http://127.0.0.1:{port}/", "chat-scripted-model", *QUESTIONS)
        _check_session_and_citations(result, pages, server.target)
    first = [m for m in result["lengths"] if m["turn"] == 1 and m["length"] > 0]
    lengths = [m["length"] for m in first]
    # Painted piece by piece: many distinct lengths, each longer than the last, spread in time.
    assert len(set(lengths)) >= 10, lengths
    assert lengths == sorted(lengths)
    assert first[-1]["at"] - first[0]["at"] > 0.3 * 1000 * 0.03 * 10


def test_a_refused_call_is_explained_in_words(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    new_key(keys, "reader", "ask")
    port = free_port()
    with server_process(
        tmp_path / "data",
        http_address=f"127.0.0.1:{port}",
        http_web="true",
        api_keys_file=str(keys),
    ):
        result = _drive(f"http://127.0.0.1:{port}/", "chat-refused", QUESTIONS[0])
    (turn,) = result["turns"]
    assert "needs an access key" in turn["error"]
    assert not turn["answer"]
