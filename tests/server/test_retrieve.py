"""Retrieve over the real server: the right chunks, filters, thresholds, validation errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from ragagent.v1 import agent_pb2, agent_pb2_grpc, types_pb2

from tests.helpers import add_documents, make_chunk, running_server

DOCS = [
    make_chunk(
        "module-01/ros2.md",
        "ROS 2 uses DDS as the middleware that carries messages between nodes.",
        module="module-01",
        chapter="chapter-01",
        url="https://book.dev/docs/module-01/ros2",
        title="ROS 2",
    ),
    make_chunk(
        "module-01/urdf.md",
        "A URDF file describes the links and joints of a robot in XML.",
        module="module-01",
        chapter="chapter-03",
        url="https://book.dev/docs/module-01/urdf",
        title="URDF",
    ),
    make_chunk(
        "module-04/whisper.md",
        "Whisper turns spoken commands into text for the robot to act on.",
        module="module-04",
        chapter="chapter-08",
        url="https://book.dev/docs/module-04/whisper",
        title="Whisper",
    ),
]


async def _retrieve(channel: grpc.aio.Channel, **fields: object) -> agent_pb2.RetrieveResponse:
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    return await stub.Retrieve(agent_pb2.RetrieveRequest(**fields), timeout=10)  # type: ignore[arg-type]


async def test_retrieve_returns_the_most_relevant_chunk_first(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv:
        await add_documents(srv.runtime, DOCS)
        response = await _retrieve(srv.channel, query="Which middleware does ROS 2 rely on?")
    assert response.sources[0].document_id == "module-01/ros2.md"
    first = response.sources[0]
    assert first.url == "https://book.dev/docs/module-01/ros2"
    assert first.title == "ROS 2"
    assert "DDS" in first.content
    assert 0.0 < first.score <= 1.0
    assert [s.score for s in response.sources] == sorted(
        (s.score for s in response.sources), reverse=True
    )
    assert response.embedding_model
    assert response.took.ToNanoseconds() > 0


async def test_threshold_filters_out_unrelated_questions(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv:
        await add_documents(srv.runtime, DOCS)
        response = await _retrieve(
            srv.channel,
            query="What is a good recipe for sourdough bread?",
            confidence_threshold=0.4,
        )
        everything = await _retrieve(
            srv.channel,
            query="What is a good recipe for sourdough bread?",
            confidence_threshold=0.0,
        )
    assert list(response.sources) == []
    assert len(everything.sources) == 3


async def test_filters_restrict_module_chapter_and_url_prefix(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv:
        await add_documents(srv.runtime, DOCS)
        by_module = await _retrieve(
            srv.channel,
            query="robot",
            confidence_threshold=0.0,
            filters=types_pb2.SearchFilters(module="module-04"),
        )
        by_chapter = await _retrieve(
            srv.channel,
            query="robot",
            confidence_threshold=0.0,
            filters=types_pb2.SearchFilters(chapter="chapter-03"),
        )
        by_prefix = await _retrieve(
            srv.channel,
            query="robot",
            confidence_threshold=0.0,
            filters=types_pb2.SearchFilters(url_prefix="https://book.dev/docs/module-01/u"),
        )
    assert [s.document_id for s in by_module.sources] == ["module-04/whisper.md"]
    assert [s.document_id for s in by_chapter.sources] == ["module-01/urdf.md"]
    assert [s.document_id for s in by_prefix.sources] == ["module-01/urdf.md"]


async def test_max_results_bounds_the_answer(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv:
        await add_documents(srv.runtime, DOCS)
        response = await _retrieve(
            srv.channel, query="robot", confidence_threshold=0.0, max_results=2
        )
    assert len(response.sources) == 2


async def test_invalid_request_lists_every_violation_as_bad_request(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _retrieve(
                srv.channel,
                query="   ",
                max_results=21,
                filters=types_pb2.SearchFilters(module="m" * 201),
            )
    error = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    bad_request = error_details_pb2.BadRequest()
    infos = [d for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
    assert any(d.Unpack(bad_request) for d in status.details)
    violations = {(v.field, v.reason) for v in bad_request.field_violations}
    assert violations == {
        ("query", "string.not_blank"),
        ("max_results", "int32.gte_lte"),
        ("filters.module", "string.max_len"),
    }
    info = error_details_pb2.ErrorInfo()
    infos[0].Unpack(info)
    assert info.domain == "ragagent.dev"
    assert info.reason == "INVALID_ARGUMENT"


async def test_concurrent_queries_batched_together_each_get_their_own_sources(
    tmp_path: Path,
) -> None:
    """Queries that arrive together share the embedder's model calls
    (service.retrieval.query_batches): each must still get what it gets asked alone."""
    queries = [
        "Which middleware carries ROS 2 messages?",
        "What does a URDF file describe?",
        "How does a robot understand spoken commands?",
    ] * 8
    async with running_server(tmp_path, confidence_threshold=0.0) as srv:
        await add_documents(srv.runtime, DOCS)

        def ranked(response: agent_pb2.RetrieveResponse) -> list[tuple[str, float]]:
            return [(s.document_id, round(s.score, 4)) for s in response.sources]

        alone = {q: ranked(await _retrieve(srv.channel, query=q)) for q in queries[:3]}
        together = await asyncio.gather(*(_retrieve(srv.channel, query=q) for q in queries))
    assert [ranked(r) for r in together] == [alone[q] for q in queries]
    assert [r.sources[0].document_id for r in together[:3]] == [
        "module-01/ros2.md",
        "module-01/urdf.md",
        "module-04/whisper.md",
    ]
