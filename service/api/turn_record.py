"""A run's turn in its session, written beside the run rather than in front of it.

A follow-up's turn begins before its run: the claim decides whether the run may go ahead
(SessionBusy, SessionNotFound) and the history goes into the prompt. A new session has
neither to wait for, so its turn begins in a task of its own while the run starts: the
first token never waits for a database write. Its session id is chosen here, so that
RunStarted can carry it at once.

Ordering, so that no message says more than was stored:

- the final message (Completed) is handed on only once the turn's begin and then its
  completion are committed. A begin or a completion that fails ends the call with that
  error instead of the final message, after whatever already streamed (as a failed
  completion always did);
- a run that fails, times out or is cancelled waits for its turn's begin, then marks the
  turn with how the run ended. A begin that failed leaves no turn to mark: its error is
  what the call ends with (a session write that fails is reported, never dropped);
- a call cancelled while the final message waits for the begin still gets its turn begun,
  then marked cancelled; cancelled again while that waits, the begin is cancelled with
  the wait, and the store withdraws it (not started) or marks the turn cancelled (in).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Literal

from service.domain import ConversationTurn, RunResult
from service.errors import DeadlineExceeded, RagAgentError

if TYPE_CHECKING:
    from service.api.agent import TurnHandleLike, Turns


class TurnRecord:
    """The session turn of one run: begun (or beginning), then completed or aborted once."""

    def __init__(
        self,
        turns: Turns,
        session_id: str,
        history: list[ConversationTurn],
        *,
        handle: TurnHandleLike | None = None,
        begin: asyncio.Task[TurnHandleLike] | None = None,
    ) -> None:
        self._turns = turns
        self.session_id = session_id
        self.history = history
        self._handle = handle
        self._begin = begin
        self._ended = False

    @classmethod
    async def open(
        cls, turns: Turns, *, session_id: str, owner: str, question: str, request_id: str
    ) -> TurnRecord:
        """A follow-up's turn, begun; a new session's, beginning (see the module docstring)."""
        if session_id:
            handle = await turns.begin_turn(
                session_id=session_id, owner=owner, question=question, request_id=request_id
            )
            return cls(turns, handle.session_id, list(handle.history), handle=handle)
        new_id = str(uuid.uuid4())
        begin = asyncio.create_task(
            turns.begin_turn(
                session_id=None,
                owner=owner,
                question=question,
                request_id=request_id,
                new_id=new_id,
            ),
            name=f"begin-turn-{request_id}",
        )
        return cls(turns, new_id, [], begin=begin)

    async def complete(self, result: RunResult) -> None:
        """Records the run's result; raises what failed (the begin, or the write)."""
        handle = await self._began(shielded=True)
        await self._turns.complete_turn(handle.turn_id, result)
        self._ended = True

    async def abort(self, error: BaseException) -> None:
        """Marks the turn with how the run ended (nothing once completed); raises what failed
        to be written."""
        if self._ended:
            return
        self._ended = True
        handle = await self._began(shielded=False)
        await self._turns.abort_turn(handle.turn_id, _abort_status(error), _describe(error))

    async def _began(self, *, shielded: bool) -> TurnHandleLike:
        if self._handle is None:
            assert self._begin is not None  # one of the two, by construction
            # Shielded on the way to the final message: a caller that goes away then still
            # gets its turn begun and marked cancelled by abort(). Awaited directly there: a
            # caller cancelled again cancels the begin, which the store withdraws or undoes.
            begin = self._begin
            self._handle = await (asyncio.shield(begin) if shielded else begin)
        return self._handle


def _abort_status(error: BaseException) -> Literal["error", "cancelled", "timeout"]:
    if isinstance(error, DeadlineExceeded):
        return "timeout"
    if isinstance(error, Exception):
        return "error"
    return "cancelled"  # CancelledError, GeneratorExit: the caller went away


def _describe(error: BaseException) -> str:
    if isinstance(error, RagAgentError):
        return f"{error.reason}: {error.message}"
    return type(error).__name__
