"""What parsing makes of the corpus, and what it costs: documents, sections, blocks and chunks
(the chunker as the server runs it, with the embedder's own token counter), and the CPU time
of parsing alone and of parsing plus chunking, the median of five passes over the corpus.

Run it on two checkouts to compare parsers: the counts must match or the difference be
explained, and recall is measured apart (`ragagent eval`, docs/evaluation.md).
"""

from __future__ import annotations

import hashlib
import statistics
import time

from tokenizers import Tokenizer

from service.config import default_model_dir
from service.ingest.chunker import Chunker
from service.ingest.loader import load_documents
from service.ingest.markdown import PARSER_VERSION, parse_markdown
from tests.bench.common import corpus

PASSES = 5


async def main() -> dict[str, float | str]:
    root, name = corpus()
    counter = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    counter.no_truncation()
    counter.no_padding()
    chunker = Chunker(lambda text: len(counter.encode(text).ids), max_tokens=256)
    documents = list(load_documents(root))
    parsed = [parse_markdown(d.content, d.path) for d in documents]
    chunks = [c for page in parsed for c in chunker.chunk(page)]
    parse_s, both_s = [], []
    for _ in range(PASSES):
        started = time.process_time()
        pages = [parse_markdown(d.content, d.path) for d in documents]
        parsed_at = time.process_time()
        for page in pages:
            chunker.chunk(page)
        parse_s.append(parsed_at - started)
        both_s.append(time.process_time() - started)
    figures: dict[str, float | str] = {
        "parser": PARSER_VERSION,
        "documents": len(documents),
        "sections": sum(len(p.sections) for p in parsed),
        "blocks": sum(len(s.blocks) for p in parsed for s in p.sections),
        "chunks": len(chunks),
        # Tells two runs whose counts agree whether their chunks do too.
        "chunks_sha256": hashlib.sha256(
            "\0".join(c.embed_text for c in chunks).encode()
        ).hexdigest()[:12],
        "parse_s": statistics.median(parse_s),
        "parse_and_chunk_s": statistics.median(both_s),
    }
    print(f"parse ({name})")
    for key, value in figures.items():
        print(f"  {key}: {value:.3f}" if isinstance(value, float) else f"  {key}: {value}")
    return figures
