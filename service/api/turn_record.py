"""A run's turn in its session, written beside the run rather than in front of it.

A follow-up's turn begins before its run: the claim decides whether the run may go ahead
(SessionBusy, SessionNotFound) and the history goes into the prompt. A new session has
neither to wait for, so its turn begins in a task of its own while the run starts: the
first token never waits for a database write. Its session id is chosen here, so that
RunStarted can carry it at once.

Ordering, so that no message says more than was stored:

- the final message (Completed) is handed on only once the turn's begin and then its
  completion are committed, and names the turn (``turn_id``). A begin or a completion that
  fails turns the final message into a failed one: status ERROR, the answer so far, no
  turn id when the begin failed, then that error (a session write that fails is reported,
  never dropped, and never passed off as an answer that was kept);
- a run that fails or times out ends with a final message too (Completed with its error),
  recorded like any other: with its status, its partial answer and why;
- a run whose caller went away waits for its turn's begin, then records the turn
  CANCELLED with what the run's events had produced. A begin that failed leaves no turn
  to mark: its error is what the call ends with;
- a call cancelled while the final message waits for the begin still gets its turn begun,
  then marked cancelled; cancelled again while that waits, the begin is cancelled with
  the wait, and the store withdraws it (not started) or marks the turn cancelled (in).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from service.agent import Completed
from service.domain import ConversationTurn, ResponseStatus
from service.errors import DeadlineExceeded, RagAgentError
from service.observability.logging import get_logger

if TYPE_CHECKING:
    from service.api.partial import PartialRun
    from service.sessions.turns import TurnHandleLike, Turns

log = get_logger("ragagent.api")
_CANCELLED = "CANCELLED: the caller cancelled the call"


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
        cls,
        turns: Turns,
        *,
        session_id: str,
        owner: str,
        question: str,
        request_id: str,
        metadata: Mapping[str, str] | None = None,
    ) -> TurnRecord:
        """A follow-up's turn, begun; a new session's, beginning (see the module docstring)."""
        if session_id:
            handle = await turns.begin_turn(
                session_id=session_id,
                owner=owner,
                question=question,
                request_id=request_id,
                metadata=metadata,
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
                metadata=metadata,
            ),
            name=f"begin-turn-{request_id}",
        )
        return cls(turns, new_id, [], begin=begin)

    async def complete(self, final: Completed) -> Completed:
        """Records the run's final event; returns it naming the turn, or, when the begin or
        the write failed, as a failed run (status ERROR) carrying that failure."""
        result, error = final.result, final.error
        why = "" if error is None else _describe(error)
        if error is None and result.status is ResponseStatus.TIMEOUT:
            why = "DEADLINE_EXCEEDED: the deadline ran out before the answer was complete"
        try:
            handle = await self._began(shielded=True)
        except Exception as failure:  # noqa: BLE001 (reported after the final message)
            self._ended = True  # no turn to mark
            return _failed(final, failure)
        result = replace(result, turn_id=handle.turn_id)
        try:
            await self._turns.complete_turn(handle.turn_id, result, why)
        except Exception as failure:  # noqa: BLE001 (reported after the final message)
            self._ended = True
            try:
                await self._turns.abort_turn(handle.turn_id, "error", _describe(failure))
            except Exception as second:  # noqa: BLE001 (the first failure is the one reported)
                log.warning(
                    "could not mark a failed turn", turn_id=handle.turn_id, error=repr(second)
                )
            return _failed(Completed(result, error), failure)
        self._ended = True
        return Completed(result, error)

    async def abort(self, error: BaseException, partial: PartialRun | None = None) -> None:
        """Marks the turn with how the run ended (nothing once recorded): a caller that went
        away gets it CANCELLED with what ``partial`` saw produced. Raises what failed to be
        written."""
        if self._ended:
            return
        self._ended = True
        handle = await self._began(shielded=False)
        status = _abort_status(error)
        if status == "cancelled" and partial is not None:
            # Nothing can reach a caller that left; its turn keeps what was produced.
            await self._turns.complete_turn(handle.turn_id, partial.result(_CANCELLED), _CANCELLED)
            return
        await self._turns.abort_turn(handle.turn_id, status, _describe(error))

    async def _began(self, *, shielded: bool) -> TurnHandleLike:
        if self._handle is None:
            assert self._begin is not None  # one of the two, by construction
            # Shielded on the way to the final message: a caller that goes away then still
            # gets its turn begun and marked cancelled by abort(). Awaited directly there: a
            # caller cancelled again cancels the begin, which the store withdraws or undoes.
            begin = self._begin
            self._handle = await (asyncio.shield(begin) if shielded else begin)
        return self._handle


def _failed(final: Completed, failure: Exception) -> Completed:
    """The final event of a run whose turn could not be stored: ERROR, with that failure."""
    result = replace(final.result, status=ResponseStatus.ERROR, finish_reason="error")
    return Completed(replace(result, grounding=None), error=failure)


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
