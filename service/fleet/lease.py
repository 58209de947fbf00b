"""The corpus write lease: one document written at a time per collection, across processes.

Writing a document is several calls (upsert its chunks, delete its other chunks, write its
record); two writers interleaving them leave a record that disagrees with the searchable
chunks (see docs/operations.md, "Running several replicas"). Every writer (each replica's
CorpusService, every ``ragagent ingest``) holds this lease while it writes or deletes one
document, and only then: never while it waits for a client, parses or embeds.

:class:`LocalLease` serialises the writers of one process (the embedded store is
single-process). :class:`~service.fleet.qdrant_lease.QdrantLease` keeps the lease in Qdrant
itself, beside the collection, so writers need no shared database: one point in
``<collection>__leases`` holding ``holder`` (a token per acquisition), ``owner`` (host and
pid, for the waiting writer's message) and ``expires_at`` (Unix seconds). Acquiring is a
conditional update (``update_mode=update_only`` with ``update_filter``: only a lease that
has expired is taken), then a read of the point: the writer holds it when the point names
its token. Qdrant applies updates to a point in order, so of two writers taking an expired
lease the second's condition no longer matches. A holder renews the lease every third of its
TTL; a writer that dies leaves it for at most the TTL. The guarantee needs the writers'
clocks to agree to well under the TTL, and a holder that stalls longer than the TTL without
renewing (a frozen process) can overlap the next one: the write then fails its renewal check
and reports an error instead of success.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from service.domain import Deadline

if TYPE_CHECKING:
    from service.retrieval.qdrant_store import QdrantStore


class WriteLease(Protocol):
    """Held while one document is written or deleted."""

    def hold(self, deadline: Deadline | None) -> contextlib.AbstractAsyncContextManager[None]: ...


class LocalLease:
    """The writers of this process, one at a time (the embedded store's whole story)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def hold(self, deadline: Deadline | None) -> AsyncIterator[None]:
        async with self._lock:
            yield


def corpus_lease(store: object, *, ttl: float, wait: float) -> WriteLease:
    """The lease for writers of ``store``: in Qdrant for a Qdrant server's collection,
    in this process for the embedded store (which only one process can open)."""
    # A server's store exists only once its module is loaded: asking sys.modules keeps
    # qdrant_client (1.8 s of every process start) off the embedded path.
    qdrant_store = sys.modules.get("service.retrieval.qdrant_store")
    if qdrant_store is None or not isinstance(store, qdrant_store.QdrantStore):
        return LocalLease()
    from service.fleet.qdrant_lease import QdrantLease

    server: QdrantStore = store
    return QdrantLease(server.calls, server.collection, ttl=ttl, wait=wait, cluster=server.cluster)
