"""Building blocks of the agent tests: a canned retriever, an agent wired to the fake server."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import openai

from service.agent import (
    Agent,
    AgentEvent,
    AgentRequest,
    AnswerDelta,
    CitationFound,
    Completed,
    Heartbeat,
    OpenAIChatModel,
    RunStarted,
    SourcesFound,
    ToolCallCompleted,
    ToolCallPending,
    ToolCallStarted,
)
from service.agent.config import StrategyName
from service.config import Settings
from service.configs import agent_config, model_client_config
from service.domain import (
    Chunk,
    Deadline,
    ResponseStatus,
    RunResult,
    ScoredChunk,
    SearchFilters,
    ToolCallRecord,
    ToolCallStatus,
)
from service.retrieval.base import Embedder, QueryVectors
from tests.fakes.openai_server import FakeOpenAI


def chunk(name: str, text: str, *, title: str = "", heading: str = "", url: str = "") -> Chunk:
    return Chunk(
        chunk_id=str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
        document_id=f"{name}.md",
        text=text,
        title=title or name.replace("-", " ").title(),
        heading=heading,
        url=url,
    )


@dataclass
class SearchCall:
    query: str
    limit: int
    threshold: float
    filters: SearchFilters | None
    deadline: Deadline | None


@dataclass
class FakeRetriever:
    """Canned hits per exact query; unknown queries find nothing. Records every search."""

    results: dict[str, list[ScoredChunk]] = field(default_factory=dict)
    delays: dict[str, float] = field(default_factory=dict)
    calls: list[SearchCall] = field(default_factory=list)
    running: int = 0
    most_running: int = 0

    def add(self, query: str, *hits: tuple[Chunk, float]) -> None:
        self.results[query] = [ScoredChunk(c, score) for c, score in hits]

    async def search(
        self,
        query: str,
        *,
        limit: int,
        threshold: float,
        filters: SearchFilters | None = None,
        deadline: Deadline | None = None,
        vectors: QueryVectors | None = None,
        with_pieces: bool = False,
    ) -> list[ScoredChunk]:
        self.calls.append(SearchCall(query, limit, threshold, filters, deadline))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(self.delays.get(query, 0.0))
        finally:
            self.running -= 1
        hits = [h for h in self.results.get(query, []) if h.score >= threshold]
        return sorted(hits, key=lambda h: -h.score)[:limit]

    @property
    def queries(self) -> list[str]:
        return [c.query for c in self.calls]


def settings(**overrides: object) -> Settings:
    """Settings for tests: quick to give up, no heartbeats unless a test asks for them."""
    values: dict[str, object] = {
        "llm_base_url": "http://127.0.0.1:9/v1",
        "llm_model": "test-model",
        "llm_max_retries": 0,
        "llm_stream_idle_timeout": 5.0,
        # Known, so that scripts hold no probe; test_model_capabilities covers the learning.
        "llm_tool_calling": "streamed",
        "heartbeat_interval": 30.0,
        "confidence_threshold": 0.3,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def make_agent(
    fake: FakeOpenAI | None,
    retriever: FakeRetriever,
    *,
    strategy: StrategyName = "agentic",
    embedder: Embedder | None = None,
    consistent_limit: int = 0,
    **overrides: object,
) -> tuple[Agent, openai.AsyncOpenAI | None]:
    """The agent over a real AsyncOpenAI client pointed at the fake (close the client).
    ``consistent_limit``: what the retriever promises (FakeRetriever keeps its promise for
    any limit: its results are sorted by score, then cut)."""
    config = settings(**overrides)
    client = None
    model = None
    if fake is not None:
        client = openai.AsyncOpenAI(
            api_key="test-key", base_url=fake.base_url, max_retries=config.llm_max_retries
        )
        model = OpenAIChatModel.from_config(client, model_client_config(config))
    agent = Agent(
        agent_config(config),
        retriever=retriever,
        model=model,
        embedder=embedder,
        strategy=strategy,
        consistent_limit=consistent_limit,
    )
    return agent, client


async def collect(events: AsyncIterator[AgentEvent]) -> list[AgentEvent]:
    return [event async for event in events]


def kinds(
    events: Sequence[AgentEvent],
    *,
    heartbeats: bool = False,
    pending: bool = False,
    citations: bool = False,
) -> list[str]:
    """The event kinds in order; heartbeats and ToolCallPending only when asked for
    (:func:`check_events` holds every call to PENDING, then EXECUTING, then its end)."""
    return [
        type(e).__name__
        for e in events
        if (heartbeats or not isinstance(e, Heartbeat))
        and (pending or not isinstance(e, ToolCallPending))
        and (citations or not isinstance(e, CitationFound))
    ]


def request(query: str, **fields: object) -> AgentRequest:
    values: dict[str, object] = {"request_id": "req-1", "session_id": "sess-1"}
    values.update(fields)
    return AgentRequest(query, **values)  # type: ignore[arg-type]


def completed(events: Sequence[AgentEvent]) -> Completed:
    """The last event, which must be Completed."""
    last = events[-1]
    assert isinstance(last, Completed), f"the run ended with {last!r}"
    return last


def shown(events: Sequence[AgentEvent]) -> list[AgentEvent]:
    """The events :func:`kinds` names (no heartbeats, no ToolCallPending), to index."""
    return [e for e in events if not isinstance(e, Heartbeat | ToolCallPending)]


def failed(events: Sequence[AgentEvent], error: type[BaseException]) -> BaseException:
    """The error of a run that failed once started: it still ended with Completed, status
    ERROR, the answer so far, and that error (reported after it)."""
    final = completed(events)
    assert final.result.status is ResponseStatus.ERROR, final.result.status
    assert final.result.finish_reason == "error"
    assert isinstance(final.error, error), f"ended with {final.error!r}, not {error.__name__}"
    check_events(events)
    return final.error


def answer_text(events: Sequence[AgentEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, AnswerDelta))


SERVER_CALL_ID = re.compile(r"^srv_[0-9a-f]{24}$")

# Phases of a run, as in tests/contract/streams.py: an event may only move the run forward.
_PHASE = {
    RunStarted: 0,
    ToolCallPending: 1,
    ToolCallStarted: 1,
    SourcesFound: 1,
    ToolCallCompleted: 1,
    AnswerDelta: 2,
    CitationFound: 2,
    Completed: 3,
}

_ENDED = {ToolCallStatus.COMPLETED, ToolCallStatus.ERROR, ToolCallStatus.TIMEOUT}


def check_events(events: Sequence[AgentEvent], *, text_before_tools: bool = False) -> None:
    """Holds a finished run's events against the documented stream order.

    RunStarted, then per retrieval ToolCallPending (status PENDING, not started), then
    ToolCallStarted (EXECUTING), SourcesFound (only with sources, naming the running call)
    and ToolCallCompleted (an end status), then AnswerDelta events, then Completed, with
    heartbeats anywhere in between; the answer deltas add up to the answer, and
    RunResult.tool_calls are the calls in the order asked for, as they ended.

    ``text_before_tools``: the agentic strategy's accepted exception, answer deltas
    before a later turn's tool events (never while a call runs).
    """
    seen = [e for e in events if not isinstance(e, Heartbeat)]
    assert seen, "no events"
    assert isinstance(seen[0], RunStarted), f"the run starts with {seen[0]!r}"
    result = completed(events).result
    assert sum(isinstance(e, RunStarted | Completed) for e in seen) == 2
    phase = 0
    running: dict[str, ToolCallRecord] = {}
    pending: set[str] = set()
    started: list[str] = []
    ended: dict[str, ToolCallRecord] = {}
    written = 0  # answer characters streamed so far
    for position, event in enumerate(seen):
        kind = _PHASE[type(event)]
        if text_before_tools and phase == 2 and kind == 1:
            phase = 1  # the exception: a later turn's tool calls
        assert kind >= phase, f"event {position} ({type(event).__name__}) is out of order"
        phase = kind
        match event:
            case ToolCallPending(call=call):
                assert call.id, f"event {position}: a tool call without id"
                assert call.id not in started, f"event {position}: {call.id} asked twice"
                assert call.status is ToolCallStatus.PENDING, f"{call.id}: {call.status}"
                assert call.started_at is None, f"{call.id}: pending yet started"
                if SERVER_CALL_ID.match(call.id):
                    assert call.name == "qdrant_retrieval"
                    assert set(call.arguments) == {"query", "top_k"}
                started.append(call.id)
                pending.add(call.id)
            case ToolCallStarted(call=call):
                assert call.id in pending, f"event {position}: {call.id} started, not pending"
                assert call.status is ToolCallStatus.EXECUTING, f"{call.id}: {call.status}"
                assert call.started_at is not None
                pending.discard(call.id)
                running[call.id] = call
            case SourcesFound(tool_call_id=call_id, sources=sources):
                assert call_id in running, f"event {position}: sources of no running call"
                assert sources, f"event {position}: SourcesFound without sources"
            case ToolCallCompleted(call=call):
                assert running.pop(call.id, None) is not None, f"{call.id} is not running"
                assert call.status in _ENDED, f"{call.id} ended {call.status}"
                ended[call.id] = call
            case AnswerDelta(text=text):
                assert text, f"event {position}: an empty AnswerDelta"
                assert not running, f"event {position}: answer text while {running} run"
                written += len(text)
            case CitationFound(citation=citation):
                assert citation.end <= written, f"event {position}: a claim not yet written"
    assert not running, f"calls never completed: {sorted(running)}"
    assert not pending, f"calls never started: {sorted(pending)}"
    assert answer_text(events) == result.answer
    streamed = [e.citation for e in events if isinstance(e, CitationFound)]
    if result.status is not ResponseStatus.NO_ANSWER:
        assert tuple(streamed) == result.citations, "citation events differ from the final list"
    check_citations(result)
    assert [c.id for c in result.tool_calls] == started, "tool_calls in start order"
    assert result.tool_calls == [ended[c] for c in started]


def check_citations(result: RunResult) -> None:
    """Every span lies inside the answer, names a listed source, and its quote lies inside
    that source's text; support is 0-1."""
    texts = {s.citation: s.hit.chunk.text for s in result.sources if s.citation}
    for c in result.citations:
        assert 0 <= c.start < c.end <= len(result.answer), c
        assert c.source in texts, f"{c}: no listed source {c.source}"
        assert 0 <= c.quote_start <= c.quote_end <= len(texts[c.source]), c
        assert 0.0 <= c.support <= 1.0, c
        assert (
            f"[{c.source}" in result.answer[c.start : c.end]
            or f", {c.source}" in (result.answer[c.start : c.end])
        ), f"{c}: the claim does not cite its source"


def server_calls(events: Sequence[AgentEvent]) -> list[ToolCallRecord]:
    """The completed tool calls the strategy made on its own."""
    return [
        e.call
        for e in events
        if isinstance(e, ToolCallCompleted) and SERVER_CALL_ID.match(e.call.id)
    ]
