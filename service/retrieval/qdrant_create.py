"""Creating collections and payload indexes so that any number of replicas may do it at once.

Replicas of one fleet start together and each makes sure the collections exist: they all
see "missing", all create, and all but one get HTTP 409 from Qdrant. That answer means what
the replica wanted is there, so it is success here (the caller then checks that the
collection fits). A cluster answers 5xx while a new collection's shards initialise, or
while a peer is elected; those calls are retried a bounded number of times with growing
pauses, within the caller's deadline, before the start fails as store unavailable.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, TypeVar

from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from service.domain import Deadline
from service.errors import StoreUnavailable
from service.observability.logging import get_logger

if TYPE_CHECKING:  # qdrant_calls uses this module at run time
    from service.retrieval.qdrant_calls import QdrantCalls, Request

T = TypeVar("T")

log = get_logger("ragagent.store")

# 6 attempts, pauses 0.25 + 0.5 + 1 + 2 + 4 s: a cluster electing a leader takes seconds.
ATTEMPTS = 6
FIRST_PAUSE_S = 0.25
CONFLICT = 409


def status_of(error: BaseException) -> int | None:
    """The HTTP status of a failed call (through our StoreUnavailable), or None."""
    cause = error.__cause__ if isinstance(error, StoreUnavailable) else error
    if isinstance(cause, UnexpectedResponse) and cause.status_code is not None:
        return int(cause.status_code)
    return None


def _transient(error: BaseException, also: frozenset[int] = frozenset()) -> bool:
    status = status_of(error)
    if status is not None:
        return status >= 500 or status == 429 or status in also
    cause = error.__cause__ if isinstance(error, StoreUnavailable) else error
    return isinstance(cause, ResponseHandlingException | OSError)  # connection refused, reset


async def setup_call(
    calls: QdrantCalls,
    request: Request[T],
    deadline: Deadline | None,
    what: str,
    *,
    attempts: int = ATTEMPTS,
    also_transient: frozenset[int] = frozenset(),
) -> T | None:
    """One call of the collection set-up: None when Qdrant answers that it already exists
    (409), the call's result otherwise; 5xx, lost connections and the statuses in
    ``also_transient`` are retried."""
    pause = FIRST_PAUSE_S
    for attempt in range(1, attempts + 1):
        try:
            return await calls.run(request, deadline, what)
        except StoreUnavailable as error:
            if status_of(error) == CONFLICT:
                log.info("already there (another replica made it)", step=what)
                return None
            left = deadline.timeout(pause + 1) if deadline else pause + 1
            if attempt == attempts or not _transient(error, also_transient) or left <= pause:
                raise
            log.warning(
                "the vector store failed during set-up; retrying",
                step=what,
                attempt=attempt,
                error=str(error),
            )
        await asyncio.sleep(pause)
        pause *= 2
    raise AssertionError("unreachable")  # pragma: no cover
