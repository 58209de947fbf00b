"""SessionService: the caller's conversations, read and deleted through the session store.

The caller is the principal the chain authenticated (:func:`caller_identity`); the store
answers NOT_FOUND for a session of anyone else, so this layer only converts messages.
"""

from __future__ import annotations

from typing import Any

import grpc
from ragagent.v1 import session_pb2, session_pb2_grpc

from service.api.convert import (
    citation_to_proto,
    source_to_proto,
    timestamp,
    timings_to_proto,
    tool_call_to_proto,
    usage_to_proto,
)
from service.api.identity import caller_access, caller_identity, sessions_visible
from service.api.readable import DocumentsReadable
from service.domain import Deadline
from service.sessions.records import RunStatus, SessionRecord, SessionStatus, TurnRecord
from service.sessions.store import SessionStore

DEFAULT_PAGE_SIZE = 20

_SESSION_STATUS = {
    SessionStatus.NEW: session_pb2.SESSION_STATUS_NEW,
    SessionStatus.ACTIVE: session_pb2.SESSION_STATUS_ACTIVE,
    SessionStatus.EXPIRED: session_pb2.SESSION_STATUS_EXPIRED,
}
_RUN_STATUS = {
    RunStatus.ACTIVE: session_pb2.RUN_STATUS_ACTIVE,
    RunStatus.COMPLETED: session_pb2.RUN_STATUS_COMPLETED,
    RunStatus.ERROR: session_pb2.RUN_STATUS_ERROR,
    RunStatus.TIMEOUT: session_pb2.RUN_STATUS_TIMEOUT,
    RunStatus.CANCELLED: session_pb2.RUN_STATUS_CANCELLED,
}


def turn_to_proto(turn: TurnRecord) -> session_pb2.Turn:
    return session_pb2.Turn(
        turn_id=turn.turn_id,
        request_id=turn.request_id,
        question=turn.question,
        answer=turn.answer,
        status=_RUN_STATUS[turn.status],
        sources=[source_to_proto(s) for s in turn.sources],
        tool_calls=[tool_call_to_proto(c) for c in turn.tool_calls],
        confidence=turn.confidence,
        # A turn that never completed has no usage or timings: unset, not zero.
        usage=usage_to_proto(turn.usage) if turn.timings is not None else None,
        timings=timings_to_proto(turn.timings) if turn.timings is not None else None,
        created_at=timestamp(turn.created_at),
        completed_at=timestamp(turn.completed_at),
        error=turn.error,
        metadata=turn.metadata,
        citations=[citation_to_proto(c) for c in turn.citations],
    )


def session_to_proto(record: SessionRecord) -> session_pb2.Session:
    return session_pb2.Session(
        session_id=record.session_id,
        status=_SESSION_STATUS[record.status],
        created_at=timestamp(record.created_at),
        last_accessed_at=timestamp(record.last_accessed),
        expires_at=timestamp(record.expires_at),
        turn_count=record.turn_count,
        turns=[turn_to_proto(turn) for turn in record.turns],
    )


class SessionServicer(session_pb2_grpc.SessionServiceServicer):
    """Converts SessionService messages to session store calls and back."""

    def __init__(
        self,
        store: SessionStore,
        *,
        default_page_size: int = DEFAULT_PAGE_SIZE,
        readable: DocumentsReadable | None = None,
    ) -> None:
        """``readable``: re-checks the sources of a session read against what its caller
        may read now (service.api.readable); None only where no corpus is served."""
        self._store = store
        self._default_page_size = default_page_size
        self._readable = readable

    async def GetSession(
        self,
        request: session_pb2.GetSessionRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> session_pb2.GetSessionResponse:
        record = await self._store.get_session(request.session_id, sessions_visible())
        if self._readable is not None:
            access = caller_access(unlabelled_public=self._readable.unlabelled_public)
            record = await self._readable.filter(
                record, access, Deadline.after(context.time_remaining())
            )
        return session_pb2.GetSessionResponse(session=session_to_proto(record))

    async def ListSessions(
        self,
        request: session_pb2.ListSessionsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> session_pb2.ListSessionsResponse:
        records, next_token = await self._store.list_sessions(
            caller_identity(),
            page_size=request.page_size or self._default_page_size,
            page_token=request.page_token,
        )
        return session_pb2.ListSessionsResponse(
            sessions=[session_to_proto(r) for r in records], next_page_token=next_token
        )

    async def DeleteSession(
        self,
        request: session_pb2.DeleteSessionRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> session_pb2.DeleteSessionResponse:
        await self._store.delete_session(request.session_id, sessions_visible())
        return session_pb2.DeleteSessionResponse()
