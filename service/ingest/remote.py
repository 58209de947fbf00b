"""The client side of CorpusService.IngestDocuments: documents streamed to a running server.

Documents are read from the iterable and written one message at a time, each write
waiting for the transport, so the client holds one document at a time whatever the size
of the corpus. The writes are explicit (``call.write``) rather than a request generator
handed to gRPC: when the iterable raises (reading a document failed), gRPC would
swallow the generator's exception and cancel the call, and the caller would see a bare
cancellation. Here the call is cancelled (so the server stops before pruning anything)
and the reader's own exception is raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

import grpc
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc

from service.ingest.loader import SourceDocument

Sent = Callable[[SourceDocument], None]


async def ingest_remote(
    channel: grpc.aio.Channel,
    documents: Iterable[SourceDocument],
    *,
    base_url: str = "",
    prune: bool = False,
    access: corpus_pb2.DocumentAccess | None = None,
    # The call's gRPC deadline, which the server sees and honours too (asyncio.timeout
    # would only stop the client).
    timeout: float | None = None,  # noqa: ASYNC109
    metadata: Sequence[tuple[str, str]] = (),
    on_sent: Sent | None = None,
) -> corpus_pb2.IngestDocumentsResponse:
    """Streams ``documents`` to the server and returns its summary.

    The first message carries the options (the server ignores them on later ones); with
    no documents, one message with only the options is sent, so that ``prune`` still
    empties the index. ``on_sent`` is called after each document is written. Errors from
    the server raise :class:`grpc.aio.AioRpcError`.
    """
    # No request iterator: grpc.aio's writer style (the stubs do not know it).
    call = corpus_pb2_grpc.CorpusServiceStub(channel).IngestDocuments(  # type: ignore[call-arg]
        timeout=timeout, metadata=tuple(metadata)
    )
    options: corpus_pb2.IngestOptions | None = corpus_pb2.IngestOptions(
        base_url=base_url, prune=prune, access=access
    )
    try:
        # The server sends its headers (x-request-id) once it has admitted the call
        # (authenticated, authorized, within limits), or ends it at once with a refusal and
        # no headers. Waiting for them first matters: a message written while a refusal is
        # arriving fails in grpc's core, and grpc.aio then reports "INTERNAL: Internal error
        # from Core" instead of the server's UNAUTHENTICATED or PERMISSION_DENIED.
        if not await call.initial_metadata():
            return await call
        for document in documents:
            message = corpus_pb2.IngestDocumentsRequest(
                options=options,
                document=corpus_pb2.Document(path=document.path, content=document.content),
            )
            options = None
            if not await _write(call, message):
                break
            if on_sent is not None:
                on_sent(document)
        if options is not None:
            await _write(call, corpus_pb2.IngestDocumentsRequest(options=options))
        await call.done_writing()
    except BaseException:
        call.cancel()
        raise
    return await call


async def _write(
    call: grpc.aio.StreamUnaryCall[
        corpus_pb2.IngestDocumentsRequest, corpus_pb2.IngestDocumentsResponse
    ],
    message: corpus_pb2.IngestDocumentsRequest,
) -> bool:
    """Writes one message; False when the server has already ended the call (awaiting the
    call then gives its status)."""
    if call.done():
        return False
    try:
        await call.write(message)
    except asyncio.InvalidStateError:
        return False
    return True
