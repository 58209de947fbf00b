"""One record per document in a Qdrant server's collection ``<collection>__documents``.

The server path's counterpart of the embedded store's records (see :mod:`edge_store`):
``ListDocuments``, ``GetCorpusStats`` and ingestion's hash comparison read one vector-less
point per document instead of every chunk. A record is written after its document's chunks
and deleted before them, so it only ever describes a complete document.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from qdrant_client import models

from service.domain import Chunk, Deadline, DocumentSummary
from service.retrieval.edge_payload import document_record, record_id, summary
from service.retrieval.qdrant_aliases import records_of
from service.retrieval.qdrant_calls import QdrantCalls
from service.retrieval.qdrant_create import setup_call

_PAGE = 512


class DocumentRecords:
    def __init__(self, calls: QdrantCalls, collection: str) -> None:
        self._calls = calls
        self._chunks = collection
        self.collection = records_of(collection)

    async def ensure(
        self, *, deadline: Deadline | None = None, cluster: dict[str, Any] | None = None
    ) -> None:
        """Creates the records collection unless it exists; several replicas may do this
        at once (see qdrant_create)."""
        client = self._calls.client
        if await setup_call(
            self._calls,
            partial(client.collection_exists, self.collection),
            deadline,
            "checking records",
        ):
            return
        await setup_call(
            self._calls,
            partial(
                client.create_collection, self.collection, vectors_config={}, **(cluster or {})
            ),
            deadline,
            "creating the records collection",
        )

    async def put(
        self, document_id: str, chunks: Sequence[Chunk], *, deadline: Deadline | None
    ) -> None:
        point = models.PointStruct(
            id=record_id(document_id), vector={}, payload=document_record(document_id, chunks)
        )
        await self._upsert([point], deadline)

    async def relabel(
        self, document_id: str, labels: Sequence[str], *, deadline: Deadline | None
    ) -> None:
        await self._calls.run(
            partial(
                self._calls.client.set_payload,
                self.collection,
                payload={"access": list(labels)},
                points=[record_id(document_id)],
                key="record",
                wait=True,
            ),
            deadline,
            "relabelling a document record",
        )

    async def delete(self, document_id: str, *, deadline: Deadline | None) -> None:
        await self._calls.run(
            partial(
                self._calls.client.delete,
                self.collection,
                points_selector=models.PointIdsList(points=[record_id(document_id)]),
                wait=True,
            ),
            deadline,
            "deleting a document record",
        )

    async def all(self, *, deadline: Deadline | None) -> list[DocumentSummary]:
        records = await self._scroll(self.collection, True, deadline)
        return [summary(r.payload or {}) for r in records]

    async def _upsert(self, points: list[models.PointStruct], deadline: Deadline | None) -> None:
        await self._calls.run(
            partial(self._calls.client.upsert, self.collection, points=points, wait=True),
            deadline,
            "writing document records",
        )

    async def _scroll(
        self, collection: str, payload: list[str] | bool, deadline: Deadline | None
    ) -> list[models.Record]:
        found: list[models.Record] = []
        offset: Any = None
        while True:
            page, offset = await self._calls.run(
                partial(
                    self._calls.client.scroll,
                    collection,
                    limit=_PAGE,
                    offset=offset,
                    with_payload=payload,
                    with_vectors=False,
                    consistency=self._calls.read_consistency,
                ),
                deadline,
                "reading document records",
            )
            found.extend(page)
            if offset is None:
                return found
