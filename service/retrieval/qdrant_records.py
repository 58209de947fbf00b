"""One record per document in a Qdrant server's collection ``<collection>__documents``.

The server path's counterpart of the embedded store's records (see :mod:`edge_store`):
``ListDocuments``, ``GetCorpusStats`` and ingestion's hash comparison read one vector-less
point per document instead of every chunk. A record is written after its document's chunks
and deleted before them, so it only ever describes a complete document. A collection made
before records existed gets them once, from one scroll of its chunks, when its records
collection is created.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from qdrant_client import models

from service.domain import Chunk, Deadline, DocumentSummary
from service.retrieval.edge_payload import document_record, record_id, summary
from service.retrieval.qdrant_calls import QdrantCalls
from service.retrieval.qdrant_create import setup_call
from service.retrieval.qdrant_payload import chunk_from_payload, complete_documents

_PAGE = 512
_SUMMARY_FIELDS = ["document_id", "document_hash", "chunk_count", "url", "title"]
_SUMMARY_FIELDS += ["module", "chapter", "created_at", "access"]


class DocumentRecords:
    def __init__(self, calls: QdrantCalls, collection: str) -> None:
        self._calls = calls
        self._chunks = collection
        self.collection = f"{collection}__documents"

    async def ensure(
        self, *, deadline: Deadline | None = None, cluster: dict[str, Any] | None = None
    ) -> None:
        """Creates the records collection (backfilled) unless it exists; several replicas
        may do this at once: the one whose create succeeds backfills (see qdrant_create)."""
        client = self._calls.client
        if await setup_call(
            self._calls,
            partial(client.collection_exists, self.collection),
            deadline,
            "checking records",
        ):
            return
        created = await setup_call(
            self._calls,
            partial(
                client.create_collection, self.collection, vectors_config={}, **(cluster or {})
            ),
            deadline,
            "creating the records collection",
        )
        if created is not None:
            await self._backfill(deadline)

    async def _backfill(self, deadline: Deadline | None) -> None:
        chunks = await self._scroll(self._chunks, _SUMMARY_FIELDS, deadline)
        complete = complete_documents(chunks)
        by_document: dict[str, list[Chunk]] = {}
        for record in chunks:
            payload = {**(record.payload or {}), "chunk_id": "", "text": ""}
            if payload.get("document_id") in complete:
                by_document.setdefault(str(payload["document_id"]), []).append(
                    chunk_from_payload(payload)
                )
        points = [
            models.PointStruct(id=record_id(doc), vector={}, payload=document_record(doc, c))
            for doc, c in by_document.items()
        ]
        for start in range(0, len(points), _PAGE):
            await self._upsert(points[start : start + _PAGE], deadline)

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
                ),
                deadline,
                "reading document records",
            )
            found.extend(page)
            if offset is None:
                return found
