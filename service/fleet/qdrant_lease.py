"""The corpus write lease kept in Qdrant itself, for writers of a Qdrant server's collection
(the protocol is described in :mod:`service.fleet.lease`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from qdrant_client import models

from service.domain import Deadline
from service.errors import DeadlineExceeded, StoreUnavailable
from service.observability.logging import get_logger
from service.retrieval.qdrant_calls import QdrantCalls
from service.retrieval.qdrant_create import setup_call

log = get_logger("ragagent.corpus")

_FIRST_POLL_S = 0.02
_MAX_POLL_S = 0.5


class QdrantLease:
    """The lease as a point in ``<collection>__leases`` (see the module docstring).

    ``ttl``: seconds a lease lasts without renewal. ``wait``: the longest a writer waits for
    another before giving up with an error."""

    def __init__(
        self,
        calls: QdrantCalls,
        collection: str,
        *,
        ttl: float,
        wait: float,
        cluster: dict[str, Any] | None = None,
    ) -> None:
        self._calls = calls
        self._cluster = dict(cluster or {})
        self.collection = f"{collection}__leases"
        self._point = str(uuid.uuid5(uuid.NAMESPACE_URL, f"ragagent-write-lease:{collection}"))
        self._ttl = ttl
        self._wait = wait
        self._owner = f"{socket.gethostname()} pid {os.getpid()}"
        self._local = asyncio.Lock()  # one contender per process: the others wait here
        self._ready = False

    async def _ensure(self, deadline: Deadline | None) -> None:
        if self._ready:
            return
        client = self._calls.client
        if not await setup_call(
            self._calls, partial(client.collection_exists, self.collection), deadline, "leases"
        ):
            await setup_call(
                self._calls,
                partial(
                    client.create_collection,
                    self.collection,
                    vectors_config={},
                    **self._cluster,
                ),
                deadline,
                "creating the leases collection",
            )
        # Insert-only: a lease some writer holds already is left as it is.
        await self._write(
            {"holder": "", "owner": "", "expires_at": 0.0},
            deadline,
            mode=models.UpdateMode.INSERT_ONLY,
        )
        self._ready = True

    async def _write(
        self,
        payload: dict[str, Any],
        deadline: Deadline | None,
        *,
        mode: models.UpdateMode = models.UpdateMode.UPDATE_ONLY,
        only_if: models.Filter | None = None,
    ) -> None:
        point = models.PointStruct(id=self._point, vector={}, payload=payload)
        await self._calls.run(
            partial(
                self._calls.client.upsert,
                self.collection,
                points=[point],
                wait=True,
                update_filter=only_if,
                update_mode=mode,
                # Through the shard's permanent leader: conditional writes of two writers are
                # decided in one order on a replicated cluster too.
                ordering=models.WriteOrdering.STRONG,
            ),
            deadline,
            "writing the corpus write lease",
        )

    async def _read(self, deadline: Deadline | None) -> dict[str, Any]:
        found = await self._calls.run(
            partial(
                self._calls.client.retrieve,
                self.collection,
                ids=[self._point],
                # A majority of replicas: the read-back sees the write it follows.
                consistency=models.ReadConsistencyType.MAJORITY,
            ),
            deadline,
            "reading the corpus write lease",
        )
        return dict(found[0].payload or {}) if found else {}

    def _claim(self, token: str) -> dict[str, Any]:
        return {"holder": token, "owner": self._owner, "expires_at": time.time() + self._ttl}

    async def _take(self, token: str, deadline: Deadline | None) -> dict[str, Any]:
        """One attempt: the lease's state after trying to take it if it has expired."""
        expired = models.Filter(
            must=[models.FieldCondition(key="expires_at", range=models.Range(lt=time.time()))]
        )
        await self._write(self._claim(token), deadline, only_if=expired)
        return await self._read(deadline)

    async def _acquire(self, token: str, deadline: Deadline | None) -> None:
        started = time.monotonic()
        pause = _FIRST_POLL_S
        told = False
        while True:
            state = await self._take(token, deadline)
            if state.get("holder") == token:
                if told:
                    log.info("corpus write lease taken", waited_s=time.monotonic() - started)
                return
            waited = time.monotonic() - started
            owner = state.get("owner") or "another writer"
            if waited >= self._wait:
                raise StoreUnavailable(
                    f"another writer ({owner}) held the corpus write lease of "
                    f"{self.collection.removesuffix('__leases')!r} for all of {waited:.0f} s "
                    "(RAGAGENT_CORPUS_LEASE_WAIT); nothing was written for this document: "
                    "retry when that ingest has finished"
                )
            if deadline is not None and deadline.timeout(pause) < pause:
                raise DeadlineExceeded(
                    f"the deadline ran out waiting {waited:.1f} s for the corpus write lease "
                    f"held by {owner}"
                )
            if not told:
                log.warning(
                    "waiting for the corpus write lease",
                    holder=owner,
                    expires_in_s=round(float(state.get("expires_at", 0)) - time.time(), 1),
                    gives_up_after_s=self._wait,
                )
                told = True
            await asyncio.sleep(pause)
            pause = min(pause * 2, _MAX_POLL_S)

    async def _renew(self, token: str, lost: asyncio.Event) -> None:
        mine = models.Filter(
            must=[models.FieldCondition(key="holder", match=models.MatchValue(value=token))]
        )
        while True:
            await asyncio.sleep(self._ttl / 3)
            try:
                await self._write(self._claim(token), None, only_if=mine)
                still = (await self._read(None)).get("holder") == token
            except (StoreUnavailable, DeadlineExceeded):
                still = False  # not renewed: the lease may lapse under us
            if not still:
                lost.set()
                return

    @contextlib.asynccontextmanager
    async def hold(self, deadline: Deadline | None) -> AsyncIterator[None]:
        async with self._local:
            await self._ensure(deadline)
            token = uuid.uuid4().hex
            await self._acquire(token, deadline)
            lost = asyncio.Event()
            renewing = asyncio.create_task(self._renew(token, lost))
            try:
                yield
            finally:
                renewing.cancel()
                try:
                    await asyncio.wait([renewing])  # its cancellation is not ours to raise
                finally:
                    await self._release(token)
            if lost.is_set():
                raise StoreUnavailable(
                    "the corpus write lease could not be renewed during a write; another "
                    "writer may have written at the same time: ingest this document again"
                )

    async def _release(self, token: str) -> None:
        mine = models.Filter(
            must=[models.FieldCondition(key="holder", match=models.MatchValue(value=token))]
        )
        # Best effort and shielded: a failed release only makes the next writer wait out
        # the TTL; a cancelled one must still free the lease.
        with contextlib.suppress(StoreUnavailable, DeadlineExceeded):
            await asyncio.shield(
                self._write({"holder": "", "owner": "", "expires_at": 0.0}, None, only_if=mine)
            )
