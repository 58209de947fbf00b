"""The log lines that explain a run, and the counters of what the metrics layer cannot see."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.domain import Chunk, Deadline, DocumentSummary
from service.observability.instruments import CountingChunkStore
from service.observability.logging import configure_logging
from service.observability.metrics import Metrics
from tests.fakes.openai_script import ChatReply, ErrorReply
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import add_documents, make_chunk
from tests.observability.support import BOOKLET, QUESTION, observed_server, scrape, value


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as fake:
        yield fake


def _lines(err: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


async def test_a_retried_model_call_is_one_line_naming_its_retries(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("INFO", "json")
    fake_llm.script_chat(
        ErrorReply(503, "overloaded", retry_after=0.01),
        ChatReply.text("URDF lists the links of a robot [1]."),
    )
    async with observed_server(
        tmp_path, llm_base_url=fake_llm.base_url, agent_strategy="retrieve_first"
    ) as srv:
        await add_documents(srv.runtime, BOOKLET)
        stub = agent_pb2_grpc.AgentServiceStub(srv.channel)
        await stub.Ask(agent_pb2.QuestionRequest(query=QUESTION), timeout=30)
        samples = scrape(srv.server.observability.metrics_port)
    lines = _lines(capsys.readouterr().err)
    (model,) = [line for line in lines if line["event"] == "model call"]
    assert model["retries"] == 1
    assert model["outcome"] == "ok"
    assert model["finish_reason"] == "stop"
    assert model["level"] == "info"
    assert len(fake_llm.chat_requests) == 2
    assert value(samples, "ragagent_model_request_seconds_count", outcome="ok") == 1
    assert (
        value(samples, "ragagent_answers_total", status="success", strategy="retrieve_first") == 1
    )
    assert [line["event"] for line in lines].count("tool call") == 1
    assert all(QUESTION not in json.dumps(line) for line in lines)


def test_library_warnings_come_through_and_openai_retries_are_raised_to_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # pytest swaps warnings.showwarning per test; start capturing afresh in this one.
    logging.captureWarnings(False)
    configure_logging("INFO", "json")
    logging.getLogger("sqlalchemy.pool").warning("pool overflow")
    logging.getLogger("openai._base_client").info("Retrying request in %f seconds", 0.5)
    logging.getLogger("openai._base_client").info("Request options: secret body")
    logging.getLogger("httpx").info("HTTP Request: POST https://example.invalid")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library's deprecation", DeprecationWarning, stacklevel=1)
    text = capsys.readouterr().err
    lines = _lines(text)
    events = {str(line["event"]): line["level"] for line in lines}
    assert events["pool overflow"] == "warning"
    assert events["Retrying request in 0.500000 seconds"] == "warning"
    assert any("a library's deprecation" in event for event in events)
    assert "secret body" not in text
    assert "HTTP Request" not in text


class _Store:
    def __init__(self) -> None:
        self.written: list[str] = []

    async def document_hashes(self, *, deadline: Deadline | None = None) -> dict[str, str]:
        return {}

    async def replace_document(
        self,
        document_id: str,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]],
        *,
        deadline: Deadline | None = None,
    ) -> int:
        self.written.append(document_id)
        return 0

    async def delete_document(self, document_id: str, *, deadline: Deadline | None = None) -> int:
        return 0

    async def list_documents(
        self, *, after: str, limit: int, deadline: Deadline | None = None, access: object = None
    ) -> list[DocumentSummary]:
        return []

    async def count(
        self, *, deadline: Deadline | None = None, access: object = None
    ) -> tuple[int, int]:
        return (0, 0)

    async def document_access(
        self, *, deadline: Deadline | None = None
    ) -> dict[str, tuple[str, ...]]:
        return {}

    async def set_document_access(
        self, document_id: str, labels: Sequence[str], *, deadline: Deadline | None = None
    ) -> int:
        return 0


async def test_ingested_chunks_are_counted_as_they_are_written() -> None:
    metrics = Metrics()
    store = CountingChunkStore(_Store(), metrics)
    chunks = [make_chunk("a.md", "one", position=0), make_chunk("a.md", "two", position=1)]
    await store.replace_document("a.md", chunks, [[0.0], [1.0]])
    await store.replace_document("b.md", chunks[:1], [[0.0]])
    assert metrics.registry.get_sample_value("ragagent_ingest_chunks_total") == 3
