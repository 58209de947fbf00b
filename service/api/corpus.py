"""CorpusService: documents in and out of the index of a running server.

Writes of one document are serialised by the ingestor's write lease (service.fleet.lease),
held while that document is written and across every replica and ``ragagent ingest`` of a
Qdrant server; nothing is held while the stream waits for the client, so an idle stream
blocks nobody, and it is ended after ``idle_timeout`` seconds without a message
(DEADLINE_EXCEEDED, saying what was written). Two ingests at once may both judge the same
new document "added" and both write it (the same chunks, one after the other); a pruning
run deletes, one document at a time under the lease, what it did not receive, which
includes a document another run added meanwhile (the last writer wins, consistently).
Reads (listing, stats) take no lock: the store keeps every document consistent on its
own, and a listing taken during an ingest simply shows it part-way.

Empty documents (no text to index) are reported as ``documents_updated`` when they had
chunks before (those were removed) and as ``documents_unchanged`` otherwise: nothing was
written and the index is as it was, so re-sending the same files always reports them
unchanged.

A stream that fails is read to its end before the error is sent (for a few seconds at
most): a grpc.aio client whose write races the end of the call reports INTERNAL "Internal
error from Core" instead of our status (grpc/grpc#36066), which would hide, for example,
which message of the stream was invalid.

grpc.aio tells a servicer that the client cancelled a stream by ending it, exactly like a
normal end, and delivers the cancellation itself a moment later. A pruning ingest that
took such an end at face value would delete every document the client had not sent yet;
so before pruning, the stream's end is confirmed by waiting briefly for a cancellation.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import grpc
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc

from service.access import ADMIN_ONLY, GROUP, PRINCIPAL, LabelError, ReadAccess, labels
from service.api.convert import duration, timestamp
from service.api.identity import caller_access, current_caller
from service.domain import Deadline, DocumentSummary
from service.errors import DeadlineExceeded, FieldViolation, InvalidArgument
from service.ingest.loader import SourceDocument
from service.ingest.outcome import DocumentStatus, IngestEvent, IngestSummary
from service.ingest.pipeline import Ingestor, InputStalled, Progress
from service.observability.logging import get_logger
from service.retrieval.base import Embedder
from service.security.principal import Role

DEFAULT_PAGE_SIZE = 50
# Longest a failed ingest keeps reading the client's stream before it answers.
DRAIN_S = 5.0
# How long a pruning ingest waits, after the stream's end, to hear of a cancellation.
END_GRACE_S = 0.1
# Default for how long an ingest stream may send nothing (RAGAGENT_INGEST_IDLE_TIMEOUT).
IDLE_TIMEOUT_S = 30.0
# IngestDocumentsResponse.warnings: most lines, longest line.
MAX_WARNINGS = 1000
MAX_WARNING_CHARS = 2048

log = get_logger("ragagent.corpus")


class CorpusIndex(Protocol):
    """The read side of the store that the corpus service describes."""

    @property
    def collection(self) -> str: ...

    @property
    def embedder(self) -> Embedder: ...

    async def list_documents(
        self,
        *,
        after: str,
        limit: int,
        deadline: Deadline | None = None,
        access: ReadAccess | None = None,
    ) -> list[DocumentSummary]: ...

    async def count(
        self, *, deadline: Deadline | None = None, access: ReadAccess | None = None
    ) -> tuple[int, int]: ...


class IngestTally:
    """A progress callback that remembers what the summary does not: how many of the empty
    documents had been indexed before. Passes every event on to ``then``."""

    def __init__(self, then: Progress | None = None) -> None:
        self.emptied = 0
        self.counts: dict[DocumentStatus, int] = {}
        self._then = then

    def __call__(self, event: IngestEvent) -> None:
        if event.status is DocumentStatus.EMPTY and event.chunks_deleted > 0:
            self.emptied += 1
        self.counts[event.status] = self.counts.get(event.status, 0) + 1
        if self._then is not None:
            self._then(event)


def ingest_response(
    summary: IngestSummary, tally: IngestTally, *, duration_s: float
) -> corpus_pb2.IngestDocumentsResponse:
    """The wire summary of an ingest (see the module docstring for empty documents)."""
    return corpus_pb2.IngestDocumentsResponse(
        documents_added=summary.added,
        documents_updated=summary.updated + tally.emptied,
        documents_unchanged=summary.unchanged + summary.empty - tally.emptied,
        documents_deleted=summary.deleted,
        documents_relabelled=summary.relabelled,
        chunks_written=summary.chunks_written,
        chunks_deleted=summary.chunks_deleted,
        duration=duration(duration_s),
        warnings=bounded_warnings(summary.warnings),
    )


def bounded_warnings(warnings: list[str]) -> list[str]:
    """The warnings within IngestDocumentsResponse.warnings' limits: a corpus full of odd
    pages must not make the summary larger than a message may be."""
    lines = [
        w if len(w) <= MAX_WARNING_CHARS else w[: MAX_WARNING_CHARS - 1] + "…" for w in warnings
    ]
    if len(lines) <= MAX_WARNINGS:
        return lines
    left_out = len(lines) - (MAX_WARNINGS - 1)
    return [*lines[: MAX_WARNINGS - 1], f"… and {left_out} more warnings (in the server log)"]


def encode_page_token(document_id: str) -> str:
    """An opaque token for "the page after ``document_id``"."""
    return base64.urlsafe_b64encode(document_id.encode("utf-8")).rstrip(b"=").decode("ascii")


def decode_page_token(token: str) -> str:
    """The document id a token continues after; InvalidArgument for anything we did not issue."""
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
        document_id = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        document_id = ""
    # Only canonical encodings are ours; anything else is a token from elsewhere or edited.
    if not document_id or encode_page_token(document_id) != token:
        raise InvalidArgument(
            [
                FieldViolation(
                    "page_token",
                    "not a token returned by ListDocuments; omit it to start from the first page",
                    "page_token.invalid",
                )
            ]
        )
    return document_id


async def next_message(
    messages: AsyncIterator[corpus_pb2.IngestDocumentsRequest], idle_timeout: float
) -> corpus_pb2.IngestDocumentsRequest | None:
    """The stream's next message, None at its end; InputStalled after ``idle_timeout`` s
    without one. Nothing is held while this waits (see the module docstring)."""
    try:
        async with asyncio.timeout(idle_timeout):
            return await anext(messages, None)
    except TimeoutError:
        raise InputStalled(
            f"the stream sent nothing for {idle_timeout:g} s (RAGAGENT_INGEST_IDLE_TIMEOUT)"
        ) from None


class _StreamDocuments:
    """The documents of an ingest stream, read one message at a time as the pipeline asks.

    Remembers which message the latest document came from, so that an error the pipeline
    raises about a document can name its position in the stream.
    """

    def __init__(
        self,
        first: corpus_pb2.IngestDocumentsRequest | None,
        rest: AsyncIterator[corpus_pb2.IngestDocumentsRequest],
        confirm_end: Callable[[], Awaitable[None]] | None = None,
        idle_timeout: float = IDLE_TIMEOUT_S,
    ) -> None:
        self._first = first
        self._rest = rest
        self._confirm_end = confirm_end
        self._idle_timeout = idle_timeout
        self.index = -1

    async def __aiter__(self) -> AsyncIterator[SourceDocument]:
        index, message = 0, self._first
        while message is not None:
            # Messages with only options (a later message's are ignored) carry nothing.
            if message.HasField("document"):
                self.index = index
                yield SourceDocument(message.document.path, message.document.content)
            index += 1
            message = await next_message(self._rest, self._idle_timeout)
        if self._confirm_end is not None:
            await self._confirm_end()

    def locate(self, error: InvalidArgument) -> InvalidArgument:
        """The pipeline's violation, with its field path prefixed by the message index."""
        if self.index < 0:
            return error
        return InvalidArgument(
            [
                v
                if v.field.startswith("[")
                else FieldViolation(f"[{self.index}].{v.field}", v.description, v.reason)
                for v in error.violations
            ]
        )


async def _drain(context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """Reads and discards what the client still sends, until it half-closes or DRAIN_S."""
    with contextlib.suppress(Exception):  # a call already ended or timed out: nothing to do
        async with asyncio.timeout(DRAIN_S):
            while await context.read() is not grpc.aio.EOF:  # type: ignore[attr-defined]
                pass


async def _confirm_end() -> None:
    """Raises CancelledError when the stream ended because the client went away.

    The cancellation arrives as a cancellation of this task, during the wait or before it.
    One that arrived before may have been swallowed on the way (Python 3.11's wait_for
    drops a cancellation that coincides with its result), so the task's count of
    cancellation requests is checked as well; ``context.cancelled()`` does not say.
    """
    await asyncio.sleep(END_GRACE_S)
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def options_labels(options: corpus_pb2.IngestOptions) -> tuple[str, ...]:
    """The labels IngestOptions.access grants every document of a stream."""
    try:
        return labels(options.access.groups, options.access.principals)
    except LabelError as error:
        raise InvalidArgument(
            [FieldViolation("options.access", str(error), "options.access_invalid")]
        ) from None


def access_to_proto(held: tuple[str, ...]) -> corpus_pb2.DocumentAccess:
    return corpus_pb2.DocumentAccess(
        groups=[label[len(GROUP) :] for label in held if label.startswith(GROUP)],
        principals=[label[len(PRINCIPAL) :] for label in held if label.startswith(PRINCIPAL)],
    )


def _committed(tally: IngestTally) -> str:
    """What an ended stream wrote before it ended, for its error message."""
    counts = tally.counts
    written = counts.get(DocumentStatus.ADDED, 0) + counts.get(DocumentStatus.UPDATED, 0)
    return (
        f"written before that and kept: {written} documents "
        f"({counts.get(DocumentStatus.ADDED, 0)} added, "
        f"{counts.get(DocumentStatus.UPDATED, 0)} updated), "
        f"{counts.get(DocumentStatus.UNCHANGED, 0)} unchanged; nothing was pruned"
    )


def document_info(summary: DocumentSummary) -> corpus_pb2.DocumentInfo:
    return corpus_pb2.DocumentInfo(
        access=access_to_proto(summary.access),
        admin_only=ADMIN_ONLY in summary.access,
        document_id=summary.document_id,
        url=summary.url,
        title=summary.title,
        module=summary.module,
        chapter=summary.chapter,
        chunk_count=summary.chunk_count,
        content_hash=summary.document_hash,
        ingested_at=timestamp(summary.ingested_at),
    )


class CorpusServicer(corpus_pb2_grpc.CorpusServiceServicer):
    """Converts CorpusService messages to ingest pipeline and store calls and back."""

    def __init__(
        self,
        ingestor: Ingestor,
        index: CorpusIndex,
        *,
        unlabelled_public: bool = False,
        idle_timeout: float = IDLE_TIMEOUT_S,
    ) -> None:
        """``unlabelled_public``: unlabelled documents are listed to every caller
        (RAGAGENT_ACCESS_UNLABELLED); listings show only what the caller may read.
        ``idle_timeout``: longest an ingest stream may send nothing."""
        self._ingestor = ingestor
        self._index = index
        self._unlabelled_public = unlabelled_public
        self._idle_timeout = idle_timeout

    def _listing_access(self) -> ReadAccess | None:
        """What the caller's listings show: every document to a writer (it replaces,
        deletes and prunes any of them, so hiding their ids would only break `ingest
        --address`; their text stays behind its labels in every search), else what it may
        read."""
        caller = current_caller()
        if caller is not None and caller.allows(Role.CORPUS_WRITE):
            return None
        return caller_access(unlabelled_public=self._unlabelled_public)

    async def IngestDocuments(
        self,
        request_iterator: AsyncIterable[corpus_pb2.IngestDocumentsRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> corpus_pb2.IngestDocumentsResponse:
        started = time.perf_counter()
        tally = IngestTally()
        try:
            summary = await self._ingest_stream(request_iterator, context, tally)
        except Exception:
            await _drain(context)
            raise
        for warning in summary.warnings:
            log.warning("ingest warning", warning=warning)
        return ingest_response(summary, tally, duration_s=time.perf_counter() - started)

    async def _ingest_stream(
        self,
        request_iterator: AsyncIterable[corpus_pb2.IngestDocumentsRequest],
        context: grpc.aio.ServicerContext[Any, Any],
        tally: IngestTally,
    ) -> IngestSummary:
        deadline = Deadline.after(context.time_remaining())
        messages = aiter(request_iterator)
        first = await next_message(messages, self._idle_timeout)
        options = first.options if first is not None else corpus_pb2.IngestOptions()
        granted = options_labels(options)
        documents = _StreamDocuments(
            first,
            messages,
            _confirm_end if options.prune else None,
            idle_timeout=self._idle_timeout,
        )
        try:
            return await self._ingestor.ingest(
                documents,
                base_url=options.base_url,
                prune=options.prune,
                progress=tally,
                deadline=deadline,
                access=granted,
            )
        except InvalidArgument as error:
            raise documents.locate(error) from None
        except InputStalled as error:
            raise DeadlineExceeded(f"{error}; {_committed(tally)}") from None

    async def DeleteDocument(
        self,
        request: corpus_pb2.DeleteDocumentRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> corpus_pb2.DeleteDocumentResponse:
        removed = await self._ingestor.delete(
            request.document_id, deadline=Deadline.after(context.time_remaining())
        )
        return corpus_pb2.DeleteDocumentResponse(chunks_deleted=removed)

    async def ListDocuments(
        self,
        request: corpus_pb2.ListDocumentsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> corpus_pb2.ListDocumentsResponse:
        size = request.page_size or DEFAULT_PAGE_SIZE
        after = decode_page_token(request.page_token) if request.page_token else ""
        # One more than a page tells whether another page follows.
        found = await self._index.list_documents(
            after=after,
            limit=size + 1,
            deadline=Deadline.after(context.time_remaining()),
            access=self._listing_access(),
        )
        page = found[:size]
        more = len(found) > size
        return corpus_pb2.ListDocumentsResponse(
            documents=[document_info(d) for d in page],
            next_page_token=encode_page_token(page[-1].document_id) if more else "",
        )

    async def GetCorpusStats(
        self,
        request: corpus_pb2.GetCorpusStatsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> corpus_pb2.GetCorpusStatsResponse:
        documents, chunks = await self._index.count(
            deadline=Deadline.after(context.time_remaining()),
            access=self._listing_access(),
        )
        embedder = self._index.embedder
        return corpus_pb2.GetCorpusStatsResponse(
            document_count=documents,
            chunk_count=chunks,
            collection=self._index.collection,
            embedding_model=embedder.model_name,
            vector_size=embedder.dimension,
        )
