"""Runs every benchmark in turn: ``python -m tests.bench``."""

from __future__ import annotations

import asyncio

from service.observability.logging import configure_logging
from tests.bench import bench_ingest, bench_retrieve


def main() -> None:
    configure_logging("WARNING", "console")
    for bench in (bench_retrieve, bench_ingest):
        print(f"== {bench.__name__}")
        asyncio.run(bench.main())


if __name__ == "__main__":
    main()
