"""The record of a run's tool calls: started, ended, timed out, in start order."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from service.agent.events import AgentEvent, ToolCallCompleted, ToolCallStarted
from service.domain import ToolCallRecord, ToolCallStatus


class ToolCallLog:
    """Every call of one run; each start and end is announced once, as an event."""

    def __init__(self, emit: Callable[[AgentEvent], Awaitable[None]]) -> None:
        self._emit = emit
        self.records: list[ToolCallRecord] = []
        self._started: dict[int, float] = {}

    async def start(
        self, call_id: str, name: str, arguments: dict[str, Any], *, origin: str
    ) -> ToolCallRecord:
        """Records a call as EXECUTING; ``origin`` is "model" or "service"."""
        record = ToolCallRecord(
            id=call_id,
            name=name,
            arguments=arguments,
            status=ToolCallStatus.EXECUTING,
            started_at=datetime.now(UTC),
            origin=origin,
        )
        self.records.append(record)
        self._started[id(record)] = time.perf_counter()
        await self._emit(ToolCallStarted(replace(record)))
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
        record.duration_s = time.perf_counter() - self._started.pop(id(record))
        await self._emit(ToolCallCompleted(replace(record)))

    async def time_out_open(self) -> None:
        for record in self.records:
            if id(record) in self._started:
                await self.end(
                    record, ToolCallStatus.TIMEOUT, error="the request's deadline ran out"
                )

    def snapshot(self) -> list[ToolCallRecord]:
        return [replace(record) for record in self.records]
