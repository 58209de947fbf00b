"""Runs the benchmarks in turn: ``python -m tests.bench [NAME ...] [--full] [--json PATH]``.

Quick mode by default; ``--full`` (or BENCH_MODE=full, which ``make bench BENCH_MODE=full``
passes through) runs the long ones at full size: the soak at 500 streams for 10 minutes, the
overhead benchmark with 500 streams and PostgreSQL. ``--json PATH`` (BENCH_JSON) writes the
overhead benchmark's figures as JSON; ``--against REV`` (BENCH_AGAINST) adds ragagent at git
revision REV to its CPU phase.
"""

from __future__ import annotations

import os

# One BLAS thread, set before NumPy loads: on 2 cores, OpenBLAS's threads keep spinning after
# each call and take the cores from whatever is timed next (measured at 10k chunks: the
# embedded store's search 13.5 -> 1.9 ms p50, the old local mode's own 24 -> 12 ms).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from service.observability.logging import configure_logging
from tests.bench import (
    bench_access,
    bench_citations,
    bench_extractive,
    bench_hostile,
    bench_http,
    bench_ingest,
    bench_overhead,
    bench_parse,
    bench_queries,
    bench_retrieve,
    bench_scale,
    bench_soak,
    bench_strategies,
)

BENCHES: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, object]]] = {
    "retrieve": lambda args: bench_retrieve.main(),
    "ingest": lambda args: bench_ingest.main(),
    "scale": lambda args: bench_scale.main(),
    "soak": lambda args: bench_soak.main(full=args.full),
    "overhead": lambda args: bench_overhead.main(
        full=args.full, json_path=args.json, phases=args.phases, against=args.against
    ),
    "strategies": lambda args: bench_strategies.main(),
    "extractive": lambda args: bench_extractive.main(),
    "http": lambda args: bench_http.main(full=args.full),
    "access": lambda args: bench_access.main(full=args.full),
    "citations": lambda args: bench_citations.main(),
    "hostile": lambda args: bench_hostile.main(full=args.full),
    "parse": lambda args: bench_parse.main(),
    "queries": lambda args: bench_queries.main(),
}


def phases(text: str) -> frozenset[str]:
    chosen = frozenset(p.strip() for p in text.split(",") if p.strip())
    if not chosen or chosen - bench_overhead.PHASES:
        raise argparse.ArgumentTypeError(f"not phases of the overhead benchmark: {text!r}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench")
    parser.add_argument("names", nargs="*", help=f"any of {', '.join(BENCHES)}; default: all")
    parser.add_argument(
        "--full",
        action="store_true",
        default=os.environ.get("BENCH_MODE") == "full",
        help="full size (default when BENCH_MODE=full)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=os.environ.get("BENCH_JSON") or None,
        help="where the overhead benchmark writes its figures as JSON (default BENCH_JSON)",
    )
    parser.add_argument(
        "--phases",
        type=phases,
        default=bench_overhead.PHASES,
        help=f"the overhead benchmark's phases, comma-separated: any of "
        f"{', '.join(sorted(bench_overhead.PHASES))}; default: all",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        default=os.environ.get("BENCH_AGAINST") or None,
        help="the overhead benchmark's CPU phase also runs ragagent at git revision REV and "
        "reports the ratio to it (default BENCH_AGAINST)",
    )
    args = parser.parse_args()
    if unknown := set(args.names) - BENCHES.keys():
        parser.error(f"unknown benchmark {', '.join(sorted(unknown))}")
    configure_logging("WARNING", "console")
    for name in args.names or BENCHES:
        print(f"== {name}{' (full)' if args.full else ''}")
        asyncio.run(BENCHES[name](args))


if __name__ == "__main__":
    main()
