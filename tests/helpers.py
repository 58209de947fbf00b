"""Helpers shared by the test packages: the local embedder and an in-process server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from service.config import Settings, default_model_dir
from service.domain import Chunk
from service.retrieval.base import Embedder
from service.runtime import Runtime
from service.server import AgentServer

_EMBEDDER: Embedder | None = None


def local_embedder() -> Embedder:
    """The default local model, loaded once per test session; skips where not provisioned."""
    global _EMBEDDER  # noqa: PLW0603 (one model load per session is the point)
    if _EMBEDDER is None:
        model_dir = default_model_dir()
        if not (model_dir / "model.onnx").is_file():
            pytest.skip(f"embedding model not provisioned in {model_dir}: run `make setup`")
        from service.retrieval.embedders import FastEmbedEmbedder

        _EMBEDDER = FastEmbedEmbedder(
            model_dir, model_name="sentence-transformers/all-MiniLM-L6-v2", threads=2
        )
    return _EMBEDDER


def make_chunk(document_id: str, text: str, *, position: int = 0, **payload: object) -> Chunk:
    return Chunk(
        chunk_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{document_id}#{position}")),
        document_id=document_id,
        text=text,
        position=position,
        document_hash="test",
        chunk_count=1,
        **payload,  # type: ignore[arg-type]
    )


# Three pages of a small book, one chunk each, for questions with answers and sources.
BOOKLET = [
    make_chunk(
        "m1/urdf.md",
        "URDF is an XML format that describes a robot. It lists the links of the robot. "
        "Joints connect the links and say how they move.",
        title="URDF",
        module="m1",
    ),
    make_chunk(
        "m1/ros2.md",
        "ROS 2 nodes exchange messages over topics. The middleware underneath is DDS.",
        title="ROS 2",
        module="m1",
    ),
    make_chunk(
        "m4/whisper.md",
        "Whisper converts speech into text so that a robot can follow spoken commands.",
        title="Whisper",
        module="m4",
    ),
]


async def add_documents(runtime: Runtime, chunks: Sequence[Chunk]) -> None:
    """Stores one-chunk documents with real embeddings (ingestion has its own tests)."""
    vectors = await runtime.embedder.embed_documents([c.text for c in chunks])
    for chunk, vector in zip(chunks, vectors, strict=True):
        await runtime.store.replace_document(chunk.document_id, [chunk], [vector])


@dataclass
class Running:
    settings: Settings
    runtime: Runtime
    server: AgentServer
    port: int
    channel: grpc.aio.Channel

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


@asynccontextmanager
async def running_server(
    data_dir: Path,
    *,
    embedder: Embedder | None = None,
    documents: Sequence[Chunk] = (),
    **overrides: object,
) -> AsyncIterator[Running]:
    """The real server on port 0 over an embedded store in ``data_dir`` holding
    ``documents`` (see add_documents), with a channel."""
    settings = Settings(address="127.0.0.1:0", data_dir=data_dir, **overrides)  # type: ignore[arg-type]
    runtime = await Runtime.open(settings, embedder=embedder or local_embedder())
    server = AgentServer(settings, runtime)
    try:
        port = await server.start()
        if documents:
            await add_documents(runtime, documents)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Running(settings, runtime, server, port, channel)
    finally:
        await server.stop(0)
        await runtime.close()
