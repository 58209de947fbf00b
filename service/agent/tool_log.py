"""The record of a run's tool calls: asked for, started, ended, in the order they were asked."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from service.agent.events import AgentEvent, ToolCallCompleted, ToolCallPending, ToolCallStarted
from service.domain import ToolCallRecord, ToolCallStatus


class ToolCallLog:
    """Every call of one run; each request, start and end is announced once, as an event."""

    def __init__(self, emit: Callable[[AgentEvent], Awaitable[None]]) -> None:
        self._emit = emit
        self.records: list[ToolCallRecord] = []
        # Calls not ended yet, with when they started executing (None: still pending).
        self._open: dict[int, float | None] = {}

    async def ask(
        self, call_id: str, name: str, arguments: dict[str, Any], *, origin: str
    ) -> ToolCallRecord:
        """Records a call as PENDING (asked for); ``origin`` is "model" or "service"."""
        record = ToolCallRecord(id=call_id, name=name, arguments=arguments, origin=origin)
        self.records.append(record)
        self._open[id(record)] = None
        await self._emit(ToolCallPending(replace(record)))
        return record

    async def begin(self, record: ToolCallRecord) -> None:
        """Moves a pending call to EXECUTING."""
        record.status = ToolCallStatus.EXECUTING
        record.started_at = datetime.now(UTC)
        self._open[id(record)] = time.perf_counter()
        await self._emit(ToolCallStarted(replace(record)))

    async def start(
        self, call_id: str, name: str, arguments: dict[str, Any], *, origin: str
    ) -> ToolCallRecord:
        """A call that executes as soon as it is asked for: PENDING, then EXECUTING."""
        record = await self.ask(call_id, name, arguments, origin=origin)
        await self.begin(record)
        return record

    async def end(
        self,
        record: ToolCallRecord,
        status: ToolCallStatus,
        *,
        result: dict[str, Any] | None = None,
        error: str = "",
    ) -> None:
        record.status = status
        record.result = result
        record.error = error
        began = self._open.pop(id(record))
        record.duration_s = 0.0 if began is None else time.perf_counter() - began
        await self._emit(ToolCallCompleted(replace(record)))

    async def time_out_open(self) -> None:
        await self.end_open(ToolCallStatus.TIMEOUT, "the request's deadline ran out")

    async def end_open(self, status: ToolCallStatus, error: str) -> None:
        """Ends every call still pending or executing (the run is ending without them)."""
        for record in self.records:
            if id(record) in self._open:
                await self.end(record, status, error=error)

    def snapshot(self) -> list[ToolCallRecord]:
        return [replace(record) for record in self.records]
