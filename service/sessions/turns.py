"""The part of the session store a run needs, as the servicer and the turn recorder see it.

A Protocol here, beside the store that implements it, so that the api layer depends on
sessions (downward) and api/agent.py and api/turn_record.py need not import each other for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

from service.domain import ConversationTurn, RunResult


class TurnHandleLike(Protocol):
    @property
    def turn_id(self) -> str: ...

    @property
    def session_id(self) -> str: ...

    @property
    def history(self) -> list[ConversationTurn]: ...


class Turns(Protocol):
    """The part of the session store a run needs."""

    async def begin_turn(
        self,
        *,
        session_id: str | None,
        owner: str,
        question: str,
        request_id: str,
        new_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> TurnHandleLike: ...

    async def complete_turn(self, turn_id: str, result: RunResult, error: str = "") -> bool: ...

    async def abort_turn(
        self, turn_id: str, status: Literal["error", "cancelled", "timeout"], error: str = ""
    ) -> bool: ...
