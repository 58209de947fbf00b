"""The embedded engine's shard on disk: its layout, configuration, lock and how calls run.

qdrant-edge is Qdrant's own engine in-process (segments, WAL, HNSW, payload indexes,
sparse vectors). Its calls block (they compute and touch files), so every call runs on the
runtime's executor, bounded by the caller's deadline, with failures mapped to ours.

Layout under ``RAGAGENT_DATA_DIR/edge/<collection>/``: ``shard/`` (the engine's files),
``ragagent.json`` (the embedding model and dimension the vectors were made with, checked at
every start, and the layout's ``format``) and ``lock`` (one process at a time, as with the
old embedded store).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

import qdrant_edge as qe

from service.datadir import private_dir
from service.domain import Deadline
from service.errors import (
    DeadlineExceeded,
    RagAgentError,
    StoreLocked,
    StoreMismatch,
    StoreUnavailable,
)
from service.executor import Blocking
from service.retrieval.piece_vectors import PIECES

T = TypeVar("T")

DENSE = "dense"
SPARSE = "bm25"
KEYWORD_INDEXES = ("document_id", "module", "chapter", "url_prefixes", "document_hash", "kind")
# Indexes added after shards were first made: created when a shard without them opens.
LATER_INDEXES = ("access",)
# 2: chunks have the ``pieces`` multivector (service.retrieval.piece_vectors). A format-1
# shard has none and cannot be given it (the engine fixes a shard's vectors at creation).
FORMAT = 2
PIECES_FROM = 2


def shard_config(dimension: int) -> qe.EdgeConfig:
    """Named dense vectors (cosine), the pieces' multivector and a sparse BM25 vector whose
    IDF the engine keeps."""
    pieces = qe.EdgeVectorParams(
        size=dimension,
        # Rows are unit length (or zero for a piece not placed): dot is their cosine.
        distance=qe.Distance.Dot,
        multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
        datatype=qe.VectorStorageDatatype.Float16,
        # No graph: pieces are only scored for the candidates the dense search found.
        hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000),
    )
    return qe.EdgeConfig(
        vectors={
            DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine),
            PIECES: pieces,
        },
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
    )


def _indexes() -> list[qe.UpdateOperation]:
    return [
        qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword)
        for name in (*KEYWORD_INDEXES, *LATER_INDEXES)
    ]


class EdgeCalls:
    """One open shard: its calls on the executor, one writer at a time, and its lock file."""

    def __init__(
        self,
        shard: qe.EdgeShard,
        lock: IO[bytes],
        *,
        executor: Blocking,
        timeout: float,
        pieces: bool = True,
    ) -> None:
        self.shard = shard
        # The shard has the pieces' multivector (made at FORMAT >= PIECES_FROM).
        self.pieces = pieces
        self._lock_file = lock
        self._executor = executor
        self._timeout = timeout
        # Writes are serialised so that a write whose caller was cancelled still finishes
        # before the next starts (the engine itself is safe to read concurrently).
        self._writing = threading.Lock()
        self._closed = False

    @classmethod
    def open_blocking(
        cls,
        root: Path,
        *,
        dimension: int,
        model_name: str,
        executor: Blocking,
        timeout: float,
    ) -> EdgeCalls:
        """Opens (or creates) the shard in ``root``; blocking: it loads every segment."""
        private_dir(root)
        lock = (root / "lock").open("ab")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise StoreLocked(
                f"the embedded store in {root} is open in another process (it is "
                "single-process): stop that process, ingest through the running server "
                "with `ragagent ingest --address`, or use a Qdrant server (RAGAGENT_QDRANT_URL)"
            ) from None
        try:
            shard, pieces = _open_shard(root, dimension=dimension, model_name=model_name)
        except BaseException:
            lock.close()
            raise
        return cls(shard, lock, executor=executor, timeout=timeout, pieces=pieces)

    async def read(self, fn: Callable[[], T], deadline: Deadline | None, what: str) -> T:
        return await self._run(fn, deadline, what)

    async def write(self, fn: Callable[[], T], deadline: Deadline | None, what: str) -> T:
        def locked() -> T:
            with self._writing:
                return fn()

        return await self._run(locked, deadline, what)

    async def _run(self, fn: Callable[[], T], deadline: Deadline | None, what: str) -> T:
        if self._closed:
            raise StoreUnavailable(f"the embedded store is closed ({what})")
        timeout = deadline.timeout(self._timeout) if deadline else self._timeout
        if timeout <= 0:
            raise DeadlineExceeded(f"the deadline ran out before {what}")
        try:
            async with asyncio.timeout(timeout):
                return await self._executor.run(fn)
        except TimeoutError:
            raise DeadlineExceeded(f"the vector store did not answer in time ({what})") from None
        except RagAgentError:
            raise
        except Exception as exc:  # the engine raises its own types
            raise StoreUnavailable(f"the vector store failed ({what}): {exc}") from exc

    async def optimize(self) -> bool:
        """Builds the HNSW index of segments past the engine's indexing threshold (and
        merges small ones). Blocking for as long as that takes (34 s to minutes per 100k
        chunks here), so writes wait: it runs when ingestion has gone quiet."""

        def optimize() -> bool:
            with self._writing:
                return False if self._closed else self.shard.optimize()

        return await self._executor.run(optimize)

    async def close(self) -> None:
        def close() -> None:
            with self._writing:
                if self._closed:
                    return
                self._closed = True
                self.shard.flush()
                self.shard.close()
                self._lock_file.close()

        await self._executor.run(close)


def _open_shard(root: Path, *, dimension: int, model_name: str) -> tuple[qe.EdgeShard, bool]:
    """The shard, and whether it has the pieces' multivector."""
    meta_path = root / "ragagent.json"
    path = root / "shard"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        problems = []
        if meta.get("dimension") != dimension:
            problems.append(f"vector size {meta.get('dimension')} != embedder's {dimension}")
        if meta.get("embedding_model") not in (None, model_name):
            problems.append(f"built with {meta['embedding_model']!r}, embedder is {model_name!r}")
        if problems:
            raise StoreMismatch(
                f"the embedded store in {root} does not fit the configured embedder ("
                + "; ".join(problems)
                + "): use another RAGAGENT_QDRANT_COLLECTION or re-ingest into a new one"
            )
        shard = qe.EdgeShard.load(str(path))
        missing = [name for name in LATER_INDEXES if name not in shard.info().payload_schema]
        for name in missing:  # the engine indexes the points it holds as it creates one
            shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
        if missing:
            shard.flush()
        return shard, int(meta.get("format", 1)) >= PIECES_FROM
    # Segments without the metadata file are a creation that did not finish: no chunk was
    # written yet (the file comes first), so starting over loses nothing.
    shutil.rmtree(path, ignore_errors=True)
    shard = qe.EdgeShard.create(str(path), shard_config(dimension))
    for op in _indexes():
        shard.update(op)
    shard.flush()
    # Written last: a folder without it is a shard whose creation did not finish.
    tmp = meta_path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"format": FORMAT, "dimension": dimension, "embedding_model": model_name})
    )
    os.replace(tmp, meta_path)
    return shard, True
