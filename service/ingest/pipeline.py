"""Ingestion: pages in, chunks with vectors out, written so that re-runs are cheap and safe.

Every document is written as a whole through ``DocumentWrites.replace_document``; chunk ids
are derived from the document id and the position, so a re-run overwrites instead of
duplicating. A document's hash covers its text and everything that shapes its chunks
(parser, chunker, embedder, base URL), so an unchanged document costs one dictionary
lookup, while a changed configuration re-indexes everything. An interrupted run leaves at
most one document half-written, which the store no longer reports as consistent, so the
next run writes it again.

Several writers (replicas, ``ragagent ingest`` commands) may write one collection at once:
each document is written or deleted under the injected :class:`WriteLease`, held for that
document only (see service.fleet.lease), so writes of one document never interleave and
nothing is held while the input is read, parsed or embedded.

Parsing and chunking are pure Python (0.5-2 s for a long page): they run on the injected
executor, the runtime's in a server, so that an ingest does not stall every other stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from service.domain import Chunk, Deadline
from service.errors import DeadlineExceeded, DocumentNotFound, FieldViolation, InvalidArgument
from service.executor import INLINE, Blocking
from service.fleet.lease import LocalLease, WriteLease
from service.ingest import budget
from service.ingest.chunker import Chunker
from service.ingest.frontmatter import without_access_key
from service.ingest.labels import document_labels
from service.ingest.loader import SourceDocument
from service.ingest.markdown import PARSER_VERSION, parse_markdown
from service.ingest.outcome import (
    DocumentStatus,
    IngestEvent,
    IngestSummary,
    PreparedDocument,
    chunk_id,
    sha256_hex,
)
from service.ingest.urls import page_url, placement
from service.retrieval import piece_vectors
from service.retrieval.base import DocumentWrites, Embedder, embed_chunks
from service.text.sentences import split_pieces

_LIST_PAGE = 200

Progress = Callable[[IngestEvent], None]


class InputStalled(DeadlineExceeded):
    """The documents' source sent nothing for too long (an idle ingest stream). Raised by
    the source; what arrived before it is written before the error propagates."""


class Ingestor:
    """Chunks, embeds and stores documents through the injected embedder and store.

    ``batch_size`` is how many chunks go to the embedder at a time, across documents, in
    ``parallel`` calls at once; the embedder splits each into its own model batches. The
    local embedder runs one ONNX thread per call (what serves concurrent questions best),
    so one call at a time would leave the second of 2 cores idle during an ingest.
    ``executor`` runs parsing and chunking (see the module docstring); the default runs
    them on the caller's thread. ``lease`` is held while each document is written or
    deleted (the default serialises this process's writers only). ``document_cpu_seconds``
    (0: unlimited) bounds the CPU time of one document's parsing and chunking (see
    :mod:`service.ingest.budget`).
    """

    def __init__(
        self,
        embedder: Embedder,
        store: DocumentWrites,
        *,
        batch_size: int = 128,
        parallel: int = 2,
        chunker: Chunker | None = None,
        clock: Callable[[], datetime] | None = None,
        executor: Blocking = INLINE,
        lease: WriteLease | None = None,
        document_cpu_seconds: float = 0.0,
    ) -> None:
        if batch_size < 1 or parallel < 1:
            raise ValueError("batch_size and parallel must be at least 1")
        self._parallel = parallel
        self._embedder = embedder
        self._store = store
        self._batch_size = batch_size
        self._chunker = chunker or Chunker(embedder.count_tokens, max_tokens=embedder.max_tokens)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._executor = executor
        self._lease = lease or LocalLease()
        self._document_cpu_s = document_cpu_seconds

    @property
    def config_version(self) -> str:
        """Everything besides the text that shapes a document's chunks and vectors."""
        return (
            f"parser-{PARSER_VERSION}|{self._chunker.version}"
            f"|{self._embedder.model_name}/{self._embedder.dimension}|{piece_vectors.FORMAT}"
        )

    def document_hash(self, document: SourceDocument, base_url: str = "") -> str:
        # Without its readers (front matter `access`): a change of those alone relabels.
        text = without_access_key(document.content)
        return sha256_hex(f"{self.config_version}|{base_url.strip()}\n{text}")

    def prepare(
        self, document: SourceDocument, *, base_url: str = "", labels: tuple[str, ...] = ()
    ) -> PreparedDocument:
        """Parses and chunks one document (no embedding, no I/O); ``labels``: who may read
        it (service.access)."""
        doc_id = document.path
        parsed = parse_markdown(document.content, doc_id)
        pieces = self._chunker.chunk(parsed)
        where = placement(doc_id)
        doc_hash = self.document_hash(document, base_url)
        created_at = self._clock().astimezone(UTC).isoformat(timespec="seconds")
        url = page_url(base_url, doc_id, parsed.slug)
        chunks = tuple(
            Chunk(
                chunk_id=chunk_id(doc_id, piece.position),
                document_id=doc_id,
                text=piece.text,
                url=url,
                title=parsed.title,
                module=where.module,
                chapter=where.chapter,
                section=piece.section,
                heading=piece.heading,
                position=piece.position,
                source_file=doc_id,
                content_hash=sha256_hex(piece.text),
                document_hash=doc_hash,
                chunk_count=len(pieces),
                created_at=created_at,
                access=labels,
            )
            for piece in pieces
        )
        return PreparedDocument(
            doc_id,
            doc_hash,
            chunks,
            tuple(piece.embed_text for piece in pieces),
            tuple(f"{doc_id}: {w}" if not w.startswith(doc_id) else w for w in parsed.warnings),
            piece_spans=tuple(
                tuple(piece_vectors.locate(c.text, [p.text for p in split_pieces(c.text)]))
                for c in chunks
            ),
            shifts=tuple(len(p.embed_text) - len(p.text) for p in pieces),
        )

    async def ingest(
        self,
        documents: AsyncIterable[SourceDocument] | Iterable[SourceDocument],
        *,
        base_url: str = "",
        prune: bool = False,
        progress: Progress | None = None,
        deadline: Deadline | None = None,
        access: tuple[str, ...] = (),
    ) -> IngestSummary:
        """Indexes the documents; with ``prune``, then deletes indexed documents not seen.
        ``access``: labels (service.access) every document gets besides its front matter's;
        a document whose labels alone changed is relabelled, not embedded again.

        Failures (store, embedder, deadline) propagate; what was written until then stays
        consistent, and running the same ingest again completes it.
        """
        started = time.monotonic()
        summary = IngestSummary()

        def report(event: IngestEvent) -> None:
            summary.record(event)
            if progress is not None:
                progress(event)

        known = await self._store.document_hashes(deadline=deadline)
        labelled = await self._store.document_access(deadline=deadline)
        seen: set[str] = set()
        # Documents are embedded in groups: one large call, ordered by length inside the
        # embedder, pads far less than a small one per document (measured on the textbook:
        # ingest / embedding alone 1.33 -> 1.11). Each document is still written whole.
        pending: list[PreparedDocument] = []
        try:
            async for document in _aiter(documents):
                _check_deadline(deadline, summary)
                _validate_path(document.path, seen)
                seen.add(document.path)
                prepared = await self._prepare_within_budget(document, base_url, known, access)
                if isinstance(prepared, Unchanged):
                    report(await self._relabel(prepared, labelled, deadline))
                elif not prepared.chunks:
                    report(await self._write(prepared, [], known, deadline))
                else:
                    pending.append(prepared)
                    if sum(len(p.chunks) for p in pending) >= self._batch_size:
                        await self._flush(pending, known, deadline, report)
        except (InvalidArgument, InputStalled):
            # Bad or stalled input ends the run, but what arrived before it is good: keep it.
            await self._flush(pending, known, deadline, report)
            raise
        await self._flush(pending, known, deadline, report)
        if prune:
            for document_id in await self._stored_ids(deadline):
                if document_id not in seen:
                    _check_deadline(deadline, summary)
                    async with self._lease.hold(deadline):
                        removed = await self._store.delete_document(document_id, deadline=deadline)
                    report(IngestEvent(document_id, DocumentStatus.DELETED, 0, removed))
        summary.duration_s = time.monotonic() - started
        return summary

    async def _prepare_within_budget(
        self,
        document: SourceDocument,
        base_url: str,
        known: dict[str, str],
        access: tuple[str, ...],
    ) -> PreparedDocument | Unchanged:
        """:meth:`_prepare_changed` in the executor, stopped when over its CPU budget (an
        INVALID_ARGUMENT naming the document) or when this task is cancelled."""
        work = budget.WorkBudget(self._document_cpu_s)
        try:
            return await self._executor.run(
                self._prepare_changed, document, base_url, known, access, work
            )
        except asyncio.CancelledError:
            work.cancel()  # the pool thread stops at its next check, not minutes later
            raise
        except budget.BudgetExceeded as exc:
            raise InvalidArgument(
                [
                    FieldViolation(
                        "document.content",
                        f"{document.path!r} was not indexed: {exc}; split the page or "
                        "simplify its markup",
                        "DOCUMENT_TOO_COSTLY",
                    )
                ]
            ) from None

    def _prepare_changed(
        self,
        document: SourceDocument,
        base_url: str,
        known: dict[str, str],
        access: tuple[str, ...],
        work: budget.WorkBudget | None = None,
    ) -> PreparedDocument | Unchanged:
        """The document parsed and chunked, or Unchanged when the stored text is current."""
        labels, notes = document_labels(document, access)
        if known.get(document.path) == self.document_hash(document, base_url):
            return Unchanged(document.path, labels, notes)
        with budget.active(work or budget.WorkBudget(0)):
            prepared = self.prepare(document, base_url=base_url, labels=labels)
        return replace(prepared, warnings=(*prepared.warnings, *notes))

    async def _relabel(
        self, doc: Unchanged, labelled: dict[str, tuple[str, ...]], deadline: Deadline | None
    ) -> IngestEvent:
        """An unchanged document, relabelled when its permissions alone have changed."""
        if tuple(labelled.get(doc.document_id, ())) == doc.labels:
            return IngestEvent(doc.document_id, DocumentStatus.UNCHANGED, warnings=doc.warnings)
        await self._store.set_document_access(doc.document_id, doc.labels, deadline=deadline)
        return IngestEvent(doc.document_id, DocumentStatus.RELABELLED, warnings=doc.warnings)

    async def _flush(
        self,
        pending: list[PreparedDocument],
        known: dict[str, str],
        deadline: Deadline | None,
        report: Progress,
    ) -> None:
        """Embeds the pending documents together, then writes each one whole."""
        if not pending:
            return
        vectors, pieces = await self._embed(pending, deadline)
        offset = 0
        for prepared in pending:
            own = vectors[offset : offset + len(prepared.chunks)]
            chunks = tuple(
                replace(chunk, piece_vectors=rows)
                for chunk, rows in zip(prepared.chunks, pieces[offset:], strict=False)
            )
            offset += len(prepared.chunks)
            report(await self._write(replace(prepared, chunks=chunks), own, known, deadline))
        pending.clear()

    async def _write(
        self,
        prepared: PreparedDocument,
        vectors: list[list[float]],
        known: dict[str, str],
        deadline: Deadline | None,
    ) -> IngestEvent:
        doc_id = prepared.document_id
        # Held for this document's calls only: another writer's calls for the same document
        # interleaving with these would leave its record and its chunks disagreeing.
        async with self._lease.hold(deadline):
            if not prepared.chunks:
                removed = await self._store.delete_document(doc_id, deadline=deadline)
                return IngestEvent(doc_id, DocumentStatus.EMPTY, 0, removed, prepared.warnings)
            removed = await self._store.replace_document(
                doc_id, prepared.chunks, vectors, deadline=deadline
            )
        status = DocumentStatus.UPDATED if doc_id in known else DocumentStatus.ADDED
        return IngestEvent(doc_id, status, len(prepared.chunks), removed, prepared.warnings)

    async def _embed(
        self, pending: list[PreparedDocument], deadline: Deadline | None
    ) -> tuple[list[list[float]], list[list[list[float]]]]:
        texts = [t for p in pending for t in p.embed_texts]
        spans = [s for p in pending for s in p.piece_spans]
        shifts = [s for p in pending for s in p.shifts]
        vectors: list[list[float]] = []
        pieces: list[list[list[float]]] = []
        for start in range(0, len(texts), self._batch_size):
            end = min(start + self._batch_size, len(texts))
            # Every ``parallel``-th text to each call: each gets long and short texts alike.
            parts = [list(range(start + i, end, self._parallel)) for i in range(self._parallel)]
            parts = [part for part in parts if part]
            try:
                async with asyncio.TaskGroup() as group:
                    calls = [
                        group.create_task(
                            embed_chunks(
                                self._embedder,
                                [texts[i] for i in part],
                                [spans[i] for i in part],
                                [shifts[i] for i in part],
                                deadline=deadline,
                            )
                        )
                        for part in parts
                    ]
            except ExceptionGroup as failed:
                # The error callers know (a deadline, the embedder unavailable), not a group:
                # the calls fail alike, and the first is the one to report.
                raise failed.exceptions[0] from None
            got: dict[int, tuple[list[float], list[list[float]]]] = {}
            for part, call in zip(parts, calls, strict=True):
                part_vectors, part_pieces = call.result()
                if len(part_vectors) != len(part):
                    raise RuntimeError(
                        f"the embedder returned {len(part_vectors)} vectors for {len(part)}"
                    )
                got.update(zip(part, zip(part_vectors, part_pieces, strict=False), strict=True))
            vectors.extend(got[i][0] for i in range(start, end))
            pieces.extend(got[i][1] for i in range(start, end))
        if len(vectors) != len(texts):
            raise RuntimeError(f"the embedder returned {len(vectors)} vectors for {len(texts)}")
        return vectors, pieces

    async def _stored_ids(self, deadline: Deadline | None) -> list[str]:
        # Listed rather than taken from document_hashes(), which leaves out documents a
        # cut-off run left incomplete: those must be pruned too.
        ids: list[str] = []
        after = ""
        while True:
            page = await self._store.list_documents(
                after=after, limit=_LIST_PAGE, deadline=deadline
            )
            ids.extend(summary.document_id for summary in page)
            if len(page) < _LIST_PAGE:
                return ids
            after = page[-1].document_id

    async def delete(self, document_id: str, *, deadline: Deadline | None = None) -> int:
        """Removes a document's chunks; :class:`DocumentNotFound` when it has none."""
        async with self._lease.hold(deadline):
            removed = await self._store.delete_document(document_id, deadline=deadline)
        if removed == 0:
            raise DocumentNotFound("document", document_id)
        return removed


@dataclass(frozen=True, slots=True)
class Unchanged:
    """A document whose stored text is current, and the labels it should have."""

    document_id: str
    labels: tuple[str, ...]
    warnings: tuple[str, ...]


async def _aiter(
    documents: AsyncIterable[SourceDocument] | Iterable[SourceDocument],
) -> AsyncIterator[SourceDocument]:
    if isinstance(documents, AsyncIterable):
        async for document in documents:
            yield document
    else:
        for document in documents:
            yield document


def _check_deadline(deadline: Deadline | None, summary: IngestSummary) -> None:
    if deadline is not None and deadline.expired:
        done = (
            summary.added + summary.updated + summary.unchanged + summary.empty + summary.relabelled
        )
        raise DeadlineExceeded(
            f"the deadline ran out during ingestion after {done} documents; "
            "running it again continues where it stopped"
        )


def _validate_path(path: str, seen: set[str]) -> None:
    problem = ""
    if not path or path.startswith("/") or "\\" in path:
        problem = "must be a relative path with '/' separators"
    elif any(part in ("", ".", "..") for part in path.split("/")):
        problem = "must not contain empty, '.' or '..' segments"
    elif path in seen:
        problem = "appears twice in one ingest"
    if problem:
        raise InvalidArgument([FieldViolation("document.path", f"{path!r} {problem}")])
