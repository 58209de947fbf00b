"""Parsing and chunking time of pages built to stall ingestion, by size: it must grow
linearly (issue 26). Shapes: nested ``>`` quotes, a list 1,500 levels deep, a run of ``[``,
unclosed ``{``. Quick mode: 0.1, 0.5 and 1 MB; ``--full`` adds 2 MB (the largest document
accepted). Measured with the local embedder's own token counter, as the server chunks.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tokenizers import Tokenizer

from service.config import default_model_dir
from service.ingest.chunker import Chunker
from service.ingest.markdown import parse_markdown


def _quotes(size: int) -> str:
    lines, total, i = [], 0, 0
    while total < size:
        line = "> " * (i % 400) + "quoted words here.\n"
        lines.append(line)
        total, i = total + len(line), i + 1
    return "".join(lines)[:size]


def _lists(size: int) -> str:
    lines, total, i = [], 0, 0
    while total < size:
        line = "  " * (i % 1500) + f"- item {i}\n"
        lines.append(line)
        total, i = total + len(line), i + 1
    return "".join(lines)[:size]


SHAPES: dict[str, Callable[[int], str]] = {
    "nested quotes": _quotes,
    "1500-level lists": _lists,
    "run of [": lambda size: "[" * size,
    "run of {": lambda size: "{" * size,
}


async def main(*, full: bool = False) -> dict[str, list[tuple[float, float]]]:
    # The embedder's counter: its tokenizer without truncation or padding.
    counter = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    counter.no_truncation()
    counter.no_padding()
    chunker = Chunker(lambda text: len(counter.encode(text).ids), max_tokens=256)
    sizes = [0.1, 0.5, 1.0, *([2.0] if full else [])]
    figures: dict[str, list[tuple[float, float]]] = {}
    for name, shape in SHAPES.items():
        row = []
        for mb in sizes:
            page = shape(int(mb * 1_000_000))
            started = time.process_time()
            chunks = chunker.chunk(parse_markdown(page, "hostile.md"))
            seconds = time.process_time() - started
            row.append((mb, seconds))
            print(f"{name:>17} {mb:4.1f} MB: {seconds:6.2f} s CPU, {len(chunks)} chunks")
        per_mb = [s / mb for mb, s in row]
        print(f"{name:>17} s/MB {' '.join(f'{x:.2f}' for x in per_mb)} (flat = linear)")
        figures[name] = row
    return figures
