"""Builders shared by the session tests: a settable clock, run results, row counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import func, select

from service.domain import (
    AnswerMode,
    Chunk,
    ResponseStatus,
    RunResult,
    ScoredChunk,
    Source,
    Timings,
    ToolCallRecord,
    ToolCallStatus,
    Usage,
)
from service.sessions import SessionStore
from service.sessions import schema as tables

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Database:
    """Where a test's stores live: ``backend`` is "sqlite" or "postgres"."""

    backend: str
    url: str
    connect_args: dict[str, Any] = field(default_factory=dict)


class OpenStore(Protocol):
    """The ``open_store`` fixture: SessionStore.open on the test's database."""

    async def __call__(self, **options: Any) -> SessionStore: ...


@dataclass
class FakeClock:
    """The store's clock: stands still until a test moves it, so TTLs need no sleeping."""

    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def result(
    answer: str = "Robots walk [1].",
    *,
    status: ResponseStatus = ResponseStatus.SUCCESS,
    session_id: str = "",
    tool_calls: int = 1,
) -> RunResult:
    chunk = Chunk(
        chunk_id="c-1",
        document_id="module-01/page-01.md",
        text="Humanoid robots walk on two legs.",
        url="https://example.test/page-01",
        title="Walking",
        position=3,
    )
    calls = [
        ToolCallRecord(
            id=f"call-{i}",
            name="qdrant_retrieval",
            arguments={"query": "how do robots walk", "limit": 5},
            status=ToolCallStatus.COMPLETED,
            started_at=START,
            duration_s=0.25,
            result={"hits": 1, "chunk_ids": ["c-1"]},
        )
        for i in range(tool_calls)
    ]
    return RunResult(
        request_id="req",
        session_id=session_id,
        answer=answer,
        sources=[Source(ScoredChunk(chunk, 0.82), citation=1)],
        confidence=0.8,
        tool_calls=calls,
        status=status,
        finish_reason="stop" if status is ResponseStatus.SUCCESS else status.value,
        usage=Usage(prompt_tokens=120, completion_tokens=30),
        timings=Timings(retrieval_s=0.1, time_to_first_token_s=0.4, total_s=1.5),
        model="test-model",
        created_at=START,
        answer_mode=AnswerMode.GENERATIVE,
        strategy="agentic",
    )


async def rows_of(store: SessionStore, session_id: str) -> dict[str, int]:
    """How many rows each table holds for the session."""
    counts = {}
    async with store.engine.connect() as connection:
        for table in (tables.turns, tables.messages, tables.tool_calls, tables.responses):
            query = select(func.count()).where(table.c.session_id == session_id)
            counts[table.name] = (await connection.execute(query)).scalar_one()
        query = select(func.count()).where(tables.sessions.c.id == session_id)
        counts["sessions"] = (await connection.execute(query)).scalar_one()
    return counts


async def roles_of(store: SessionStore, turn_id: str) -> list[str]:
    """The roles of the messages recorded for a turn, in order."""
    async with store.engine.connect() as connection:
        query = (
            select(tables.messages.c.role)
            .where(tables.messages.c.turn_id == turn_id)
            .order_by(tables.messages.c.id)
        )
        return list((await connection.execute(query)).scalars())
