"""How the store's Qdrant calls run, and the collection they run against.

The embedded client is synchronous behind ``async def``: a search with the unknown-term
check scans every chunk, a write pickles points into SQLite, opening reads every point. On
the event loop each such call stalls every stream. Given the runtime's executor, every call
of an embedded client runs there, one at a time (the embedded collection is plain Python
state, not safe to use from two threads). A server's client does network I/O on the loop
and is awaited there.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, NamedTuple, TypeVar

from qdrant_client import AsyncQdrantClient, models

from service.domain import Deadline
from service.errors import DeadlineExceeded, RagAgentError, StoreMismatch, StoreUnavailable
from service.executor import Blocking
from service.retrieval.piece_vectors import PIECES
from service.retrieval.qdrant_create import setup_call
from service.retrieval.qdrant_payload import DENSE

T = TypeVar("T")
Request = Callable[[], Coroutine[Any, Any, T]]

SPARSE = "bm25"
# Payload fields the store filters on; indexed on servers (local mode scans anyway).
KEYWORD_INDEXES = ("document_id", "module", "chapter", "url_prefixes", "document_hash", "access")


class QdrantCalls:
    """Runs one client's calls, bounded by a deadline, with failures mapped to ours.

    ``executor`` is for an embedded client only: its calls then run there. Without one,
    calls are awaited on the loop, which a server's client needs (it does real I/O).
    """

    def __init__(
        self,
        client: AsyncQdrantClient,
        *,
        timeout: float,
        executor: Blocking | None = None,
        read_consistency: models.ReadConsistency | None = None,
    ) -> None:
        self.client = client
        # How many replicas of a shard a search or read asks (None: Qdrant's default, one).
        self.read_consistency = read_consistency
        self._timeout = timeout
        self._executor = executor
        # Held by the executor's thread for the whole call, so that a call whose caller was
        # cancelled still finishes before the next one starts.
        self._embedded_lock = threading.Lock()

    async def run(self, request: Request[T], deadline: Deadline | None, what: str) -> T:
        """Makes one call. ``request`` makes its coroutine (usually a ``partial`` of a client
        method): where the call runs, and not at all once the deadline is past."""
        timeout = deadline.timeout(self._timeout) if deadline else self._timeout
        if timeout <= 0:
            raise DeadlineExceeded(f"the deadline ran out before {what}")
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # coincides with the result, and a cancelled call must stay cancelled.
            async with asyncio.timeout(timeout):
                if self._executor is None:
                    return await request()
                return await self._executor.run(self._run_embedded, request)
        except TimeoutError:
            raise DeadlineExceeded(f"the vector store did not answer in time ({what})") from None
        except RagAgentError:
            raise
        except Exception as exc:  # the client raises many types: httpx, grpc, its own
            raise StoreUnavailable(f"the vector store failed ({what}): {exc}") from exc

    def _run_embedded(self, request: Request[T]) -> T:
        """Runs an embedded client's call to its end on this (executor) thread.

        Its coroutine never waits on anything (the embedded client only computes and reads
        or writes its SQLite file), so a single step runs it to completion, with no loop.
        """
        with self._embedded_lock:
            work = request()
            try:
                work.send(None)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            work.close()
        raise RuntimeError("the embedded Qdrant client waited on I/O; it was synchronous")

    async def close(self) -> None:
        # As a call: an embedded client must not close under a call still running.
        await self.run(self.client.close, None, "closing")


async def ensure_collection(
    calls: QdrantCalls,
    collection: str,
    *,
    dimension: int,
    model_name: str,
    payload_indexes: bool,
    deadline: Deadline | None = None,
    cluster: dict[str, Any] | None = None,
) -> Layout:
    """Creates the collection for the embedder, or checks that the existing one fits it.

    Its layout: ``named`` when it has named vectors, ``dense`` and the sparse ``bm25`` that
    hybrid search needs (False for one made before, with its one unnamed vector, which
    keeps working for dense search); ``pieces`` when it has the pieces' multivector
    (service.retrieval.piece_vectors; every collection made now). ``cluster``: shard
    number, replication and write consistency factors for a new collection (see
    service.config.fleet)."""
    client = calls.client
    # Every step tolerates other replicas doing the same at once (see qdrant_create).
    exists = await setup_call(
        calls, partial(client.collection_exists, collection), deadline, "checking the collection"
    )
    created = False
    if not exists:
        created = (
            await setup_call(
                calls,
                partial(
                    client.create_collection,
                    collection,
                    vectors_config={
                        DENSE: models.VectorParams(size=dimension, distance=models.Distance.COSINE),
                        PIECES: pieces_params(dimension),
                    },
                    # The engine keeps the IDF part of BM25: documents store term frequencies.
                    sparse_vectors_config={
                        SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)
                    },
                    metadata={"embedding_model": model_name},
                    **(cluster or {}),
                ),
                deadline,
                "creating the collection",
            )
            is not None
        )
    info = None
    if not created:  # it was there, or another replica made it first: does it fit?
        info = await setup_call(
            calls, partial(client.get_collection, collection), deadline, "reading the collection"
        )
        assert info is not None  # a read never answers 409
        check_fits(info, collection, dimension=dimension, model_name=model_name)
    vectors = info.config.params.vectors if info is not None else None
    layout = Layout(
        named=info is None
        or (isinstance(vectors, dict) and SPARSE in (info.config.params.sparse_vectors or {})),
        pieces=info is None or (isinstance(vectors, dict) and PIECES in vectors),
    )
    if not payload_indexes:  # local mode ignores them (and warns)
        return layout
    # Made by whoever created the collection; a replica that finds one missing (its maker
    # stopped half-way) makes it. Creating an index that exists is accepted by Qdrant.
    have = set(info.payload_schema) if info is not None else set()
    schemas: list[tuple[str, models.PayloadSchemaType | models.TextIndexParams]] = [
        (name, models.PayloadSchemaType.KEYWORD) for name in KEYWORD_INDEXES
    ]
    for name, schema in schemas:
        if name not in have:
            await setup_call(
                calls,
                partial(client.create_payload_index, collection, name, schema, wait=True),
                deadline,
                "creating payload indexes",
            )
    return layout


class Layout(NamedTuple):
    named: bool
    pieces: bool


def pieces_params(dimension: int) -> models.VectorParams:
    """The pieces' multivector: unit rows (zero for a piece not placed), so dot is their
    cosine; float16 as before; no HNSW graph, since pieces are only scored for the
    candidates the dense search found (see EdgeStore's shard_config, the same)."""
    return models.VectorParams(
        size=dimension,
        distance=models.Distance.DOT,
        multivector_config=models.MultiVectorConfig(
            comparator=models.MultiVectorComparator.MAX_SIM
        ),
        datatype=models.Datatype.FLOAT16,
        hnsw_config=models.HnswConfigDiff(m=0),
    )


def check_fits(
    info: models.CollectionInfo, collection: str, *, dimension: int, model_name: str
) -> None:
    params = info.config.params.vectors
    if isinstance(params, dict):
        params = params.get(DENSE)
    size = params.size if isinstance(params, models.VectorParams) else None
    distance = params.distance if isinstance(params, models.VectorParams) else None
    stored_model = (info.config.metadata or {}).get("embedding_model")
    problems = []
    if size != dimension:
        problems.append(f"vector size {size} != embedder's {dimension}")
    if distance != models.Distance.COSINE:
        problems.append(f"distance {distance} != Cosine")
    if stored_model is not None and stored_model != model_name:
        problems.append(f"built with {stored_model!r}, embedder is {model_name!r}")
    if problems:
        raise StoreMismatch(
            f"collection {collection!r} does not fit the configured embedder ("
            + "; ".join(problems)
            + "): use another RAGAGENT_QDRANT_COLLECTION or re-ingest into a new one"
        )
