"""A run embeds each distinct query once: the model's search for the question the run has
just searched for itself reuses its vector (issue 15). Against the embedded store, whose
embedder is what a run would otherwise call once per search."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from service.domain import Deadline
from service.executor import BlockingExecutor
from service.retrieval.edge_store import EdgeStore
from tests.agent.support import collect, completed, make_agent, request
from tests.fakes.openai_server import ChatReply, FakeOpenAI, ToolCallScript
from tests.retrieval.test_store_contract import WordsEmbedder, chunk

QUESTION = "How do robot joints and links move?"


class CountingEmbedder(WordsEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    async def embed_query(self, text: str, *, deadline: Deadline | None = None) -> list[float]:
        self.queries.append(text)
        return await super().embed_query(text, deadline=deadline)

    async def embed_documents(
        self, texts: Sequence[str], *, deadline: Deadline | None = None
    ) -> list[list[float]]:
        return [self.vector(t) for t in texts]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[tuple[EdgeStore, CountingEmbedder]]:
    executor = BlockingExecutor(2)
    embedder = CountingEmbedder()
    opened = await EdgeStore.open(tmp_path, embedder, collection="d", executor=executor)
    texts = ["Robot joints connect links and move them.", "Links are the rigid robot parts."]
    chunks = [chunk("robots-joints", i, text, count=len(texts)) for i, text in enumerate(texts)]
    await opened.replace_document("robots-joints", chunks, await embedder.embed_documents(texts))
    yield opened, embedder
    await opened.close()
    await executor.shutdown()


def search(query: str, id: str) -> ToolCallScript:
    return ToolCallScript("qdrant_retrieval", json.dumps({"query": query, "top_k": 2}), id=id)


async def test_the_models_search_for_the_question_reuses_the_runs_vector(
    fake_openai: FakeOpenAI, store: tuple[EdgeStore, CountingEmbedder]
) -> None:
    edge, embedder = store
    fake_openai.script_chat(
        ChatReply.calls(search(QUESTION, "call_1"), search("robot links", "call_2")),
        ChatReply.calls(search(QUESTION, "call_3")),
        ChatReply.text("Joints move links [1]."),
    )
    agent, client = make_agent(fake_openai, edge, embedder=embedder)  # type: ignore[arg-type]
    try:
        events = await collect(agent.run(request(QUESTION)))
    finally:
        assert client is not None
        await client.close()

    result = completed(events).result
    # Four searches (the run's own, then three of the model's), two distinct queries.
    assert len(result.tool_calls) == 4
    assert all(call.result["hits"] > 0 for call in result.tool_calls)  # type: ignore[index]
    assert sorted(embedder.queries) == sorted([QUESTION, "robot links"])


async def test_each_run_embeds_its_query_afresh(
    fake_openai: FakeOpenAI, store: tuple[EdgeStore, CountingEmbedder]
) -> None:
    edge, embedder = store
    fake_openai.script_chat(ChatReply.text("Joints [1]."), ChatReply.text("Links [1]."))
    agent, client = make_agent(fake_openai, edge, strategy="retrieve_first", embedder=embedder)  # type: ignore[arg-type]
    try:
        for _ in range(2):
            await collect(agent.run(request(QUESTION)))
    finally:
        assert client is not None
        await client.close()

    assert embedder.queries == [QUESTION, QUESTION]
