"""The HTTP reranker against a scripted /rerank endpoint: both response forms, its scores as
the threshold's input, and every failure falling back to the lexical order, counted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack

import httpx
import pytest

from service.config import Settings
from service.domain import Deadline, ScoredChunk
from service.errors import ConfigurationError
from service.retrieval.http_rerank import HttpReranker, RerankResponseError, read_ranking
from service.retrieval.rerank import LexicalReranker
from service.runtime import build_reranker
from tests.helpers import make_chunk
from tests.retrieval.rerank_server import Script, rerank_server

CANDIDATES = [
    ScoredChunk(make_chunk("a", "robots use sensors", heading="Sensors"), 0.62),
    ScoredChunk(make_chunk("b", "the safety node checks plans"), 0.60),
    ScoredChunk(make_chunk("c", "gazebo simulates worlds"), 0.55),
]
QUERY = "which node checks plans for safety?"


@pytest.fixture
def script() -> Iterator[Script]:
    with rerank_server() as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as opened:
        yield opened


def reranker(
    client: httpx.AsyncClient, script: Script, reasons: list[str], **options: object
) -> HttpReranker:
    return HttpReranker(
        client,
        url=script.url,
        fallback=LexicalReranker(),
        on_fallback=reasons.append,
        **options,  # type: ignore[arg-type]
    )


def ids(hits: list[ScoredChunk]) -> list[str]:
    return [h.chunk.document_id for h in hits]


@pytest.mark.parametrize("mode", ["results", "list"])
async def test_the_endpoints_order_is_kept_with_the_retrieval_scores(
    client: httpx.AsyncClient, script: Script, mode: str
) -> None:
    script.mode = mode
    reasons: list[str] = []
    found = await reranker(client, script, reasons, model="bge", api_key="k1").rerank(
        QUERY, CANDIDATES
    )
    assert ids(found) == ["c", "b", "a"]
    assert [h.score for h in found] == [0.55, 0.60, 0.62]
    assert reasons == []
    [sent] = script.requests
    assert sent["query"] == QUERY
    assert sent["top_n"] == 3
    assert sent["model"] == "bge"
    assert sent["documents"][0] == "Sensors\n\nrobots use sensors"
    assert script.headers[0]["Authorization"] == "Bearer k1"


async def test_its_scores_can_replace_the_retrieval_scores(
    client: httpx.AsyncClient, script: Script
) -> None:
    found = await reranker(client, script, [], replace_scores=True).rerank(QUERY, CANDIDATES)
    assert [(h.chunk.document_id, h.score) for h in found] == [
        ("c", 0.75),
        ("b", 0.5),
        ("a", 0.25),
    ]


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("status", "status"),
        ("not_json", "malformed"),
        ("no_results", "malformed"),
        ("bad_index", "malformed"),
        ("twice", "malformed"),
    ],
)
async def test_a_failing_endpoint_falls_back_to_the_lexical_order(
    client: httpx.AsyncClient, script: Script, mode: str, reason: str
) -> None:
    script.mode = mode
    reasons: list[str] = []
    found = await reranker(client, script, reasons, replace_scores=True).rerank(QUERY, CANDIDATES)
    assert found == await LexicalReranker().rerank(QUERY, CANDIDATES)
    assert reasons == [reason]


async def test_a_slow_endpoint_is_bounded_by_its_timeout(
    client: httpx.AsyncClient, script: Script
) -> None:
    script.mode = "hang"
    reasons: list[str] = []
    found = await reranker(client, script, reasons, timeout=0.2).rerank(QUERY, CANDIDATES)
    assert ids(found) == ids(await LexicalReranker().rerank(QUERY, CANDIDATES))
    assert reasons == ["timeout"]


async def test_a_slow_endpoint_is_bounded_by_the_calls_deadline(
    client: httpx.AsyncClient, script: Script
) -> None:
    script.mode = "hang"
    reasons: list[str] = []
    slow = reranker(client, script, reasons, timeout=30.0)
    await slow.rerank(QUERY, CANDIDATES, deadline=Deadline.after(0.2))
    assert reasons == ["timeout"]
    # A spent deadline: no request is waited for at all.
    await slow.rerank(QUERY, CANDIDATES, deadline=Deadline.after(0))
    assert reasons == ["timeout", "timeout"]


async def test_a_refused_connection_falls_back(client: httpx.AsyncClient) -> None:
    with rerank_server() as gone:
        url = gone.url
    reasons: list[str] = []
    down = HttpReranker(client, url=url, fallback=LexicalReranker(), on_fallback=reasons.append)
    assert len(await down.rerank(QUERY, CANDIDATES)) == 3
    assert reasons == ["connection"]


async def test_cancelling_the_search_cancels_the_request(
    client: httpx.AsyncClient, script: Script
) -> None:
    script.mode = "hang"
    reasons: list[str] = []
    slow = reranker(client, script, reasons, timeout=30.0)
    task = asyncio.create_task(slow.rerank(QUERY, CANDIDATES))
    assert await asyncio.to_thread(script.received.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert reasons == []


def test_the_response_is_checked_before_it_is_used() -> None:
    assert read_ranking({"results": [{"index": 1, "relevance_score": 2}]}, 2) == [(1, 2.0)]
    for bad in (
        {"results": "x"},
        {"results": [{"index": -1, "relevance_score": 0.1}]},
        {"results": [{"index": True, "relevance_score": 0.1}]},
        {"results": [{"index": 0, "relevance_score": "high"}]},
        {"results": [{"index": 0, "relevance_score": float("nan")}]},
        [],
        None,
    ):
        with pytest.raises(RerankResponseError):
            read_ranking(bad, 2)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"reranker": "http"}, "needs RAGAGENT_RERANKER_URL"),
        ({"reranker": "http", "reranker_url": "127.0.0.1:8080/rerank"}, "not an http"),
    ],
)
async def test_an_http_reranker_without_a_usable_url_stops_start_up(
    settings: dict[str, str], message: str
) -> None:
    async with AsyncExitStack() as stack:
        with pytest.raises(ConfigurationError, match=message):
            build_reranker(Settings(**settings), stack)  # type: ignore[arg-type]


async def test_the_settings_choose_the_reranker() -> None:
    async with AsyncExitStack() as stack:
        assert build_reranker(Settings(reranker="none"), stack) is None
        assert isinstance(build_reranker(Settings(), stack), LexicalReranker)
        url = "http://127.0.0.1:1/rerank"
        chosen = build_reranker(Settings(reranker="http", reranker_url=url), stack)
        assert isinstance(chosen, HttpReranker)
