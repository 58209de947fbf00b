"""The OpenAI-compatible embedder against the scripted server: vectors, probing, failures."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from service.config import Settings
from service.domain import Deadline
from service.errors import DeadlineExceeded, Unavailable
from service.retrieval.embedders import OpenAIEmbedder
from service.runtime import Runtime
from tests.fakes.openai_script import ErrorReply
from tests.fakes.openai_server import FakeOpenAI


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(embedding_dimension=48) as server:
        yield server


@pytest.fixture
async def client(fake: FakeOpenAI) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as c:
        yield c


async def test_probe_learns_the_dimension_and_vectors_are_normalised(
    client: openai.AsyncOpenAI, fake: FakeOpenAI
) -> None:
    embedder = await OpenAIEmbedder.probe(client, model_name="text-embed", batch_size=2)
    vectors = await embedder.embed_documents(["one", "two", "three"])
    assert embedder.dimension == 48
    assert len(vectors) == 3
    for vector in vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-6)
    # Batches of two: the probe, then ["one", "two"], then ["three"].
    assert [r.body["input"] for r in fake.embedding_requests[1:]] == [["one", "two"], ["three"]]
    assert fake.embedding_requests[1].body["model"] == "text-embed"


async def test_the_same_text_always_gets_the_same_vector(client: openai.AsyncOpenAI) -> None:
    embedder = OpenAIEmbedder(client, model_name="m", dimension=48)
    first = await embedder.embed_query("ROS 2 nodes")
    again = await embedder.embed_query("ROS 2 nodes")
    assert first == again


async def test_endpoint_failure_is_unavailable(
    client: openai.AsyncOpenAI, fake: FakeOpenAI
) -> None:
    fake.script_embeddings(ErrorReply(503, "overloaded"))
    embedder = OpenAIEmbedder(client, model_name="m", dimension=48)
    with pytest.raises(Unavailable, match="embeddings endpoint failed"):
        await embedder.embed_query("anything")


async def test_an_expired_deadline_sends_nothing(
    client: openai.AsyncOpenAI, fake: FakeOpenAI
) -> None:
    embedder = OpenAIEmbedder(client, model_name="m", dimension=48)
    with pytest.raises(DeadlineExceeded):
        await embedder.embed_query("anything", deadline=Deadline.after(0))
    assert fake.embedding_requests == []


async def test_the_server_runs_on_openai_embeddings_by_configuration(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    settings = Settings(
        address="127.0.0.1:0",
        data_dir=tmp_path,
        embedding_provider="openai",
        embedding_model="text-embed",
        embedding_base_url=fake.base_url,
    )
    runtime = await Runtime.open(settings)
    try:
        assert runtime.embedder.dimension == 48
        assert runtime.embedder.model_name == "text-embed"
    finally:
        await runtime.close()
