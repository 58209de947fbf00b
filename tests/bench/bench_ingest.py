"""Ingest throughput: the whole corpus, then a re-ingest of the unchanged corpus.

Baseline: embedding the same chunk texts alone (the floor any ingest pays). The ratio
ingest / embedding shows what parsing, chunking and the store add; the re-ingest ratio shows
that an unchanged corpus costs next to nothing.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from service.config import Settings
from service.ingest.loader import load_documents
from service.ingest.pipeline import Ingestor
from service.observability.logging import configure_logging
from service.runtime import Runtime
from tests.bench.common import corpus, report


async def main() -> None:
    root, name = corpus()
    with tempfile.TemporaryDirectory() as tmp:
        runtime = await Runtime.open(Settings(address="127.0.0.1:0", data_dir=Path(tmp)))
        try:
            ingestor = Ingestor(runtime.embedder, runtime.store)
            documents = list(load_documents(root))
            texts = [t for d in documents for t in ingestor.prepare(d).embed_texts]

            started = time.perf_counter()
            await runtime.embedder.embed_documents(texts)
            embedding_s = time.perf_counter() - started

            started = time.perf_counter()
            first = await ingestor.ingest(documents)
            ingest_s = time.perf_counter() - started

            started = time.perf_counter()
            again = await ingestor.ingest(documents)
            reingest_s = time.perf_counter() - started
        finally:
            await runtime.close()
    print(f"corpus: {name}, {len(documents)} documents, {len(texts)} chunks")
    report(
        "full ingest",
        f"{ingest_s:.1f} s ({first.chunks_written / ingest_s:.1f} chunks/s)",
        f"embedding alone {embedding_s:.1f} s",
        ingest_s / embedding_s,
        "target <= 1.3: the pipeline adds little to embedding",
    )
    report(
        "re-ingest of the unchanged corpus",
        f"{reingest_s:.2f} s ({again.unchanged} unchanged, {again.chunks_written} written)",
        f"full ingest {ingest_s:.1f} s",
        reingest_s / ingest_s,
        "target <= 0.05",
    )


if __name__ == "__main__":
    configure_logging("WARNING", "console")
    asyncio.run(main())
