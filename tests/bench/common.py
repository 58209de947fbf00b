"""What the benchmarks share: a corpus, a store, timing and reporting."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _book() -> Path:
    """The shared textbook beside the repository, or beside the folder of worktrees that
    holds it (/work/shared next to /work/main and /work/wt/<name>)."""
    candidates = [p / "shared" / "corpus" / "physical-ai-book" / "docs" for p in ROOT.parents]
    return next((c for c in candidates if c.is_dir()), candidates[0])


BOOK = _book()


def corpus() -> tuple[Path, str]:
    """The shared textbook when present, else this project's own docs."""
    if BOOK.is_dir():
        return BOOK, "physical-ai-book"
    return ROOT / "docs", "ragagent docs (../shared is absent)"


async def timed(action: Callable[[], Awaitable[object]], repeat: int) -> list[float]:
    """Wall-clock seconds of each of ``repeat`` runs, after one warm-up run."""
    await action()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await action()
        samples.append(time.perf_counter() - started)
    return samples


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms"


def report(name: str, measured: str, baseline: str, ratio: float, target: str) -> None:
    print(f"{name}\n  measured: {measured}\n  baseline: {baseline}")
    print(f"  ratio:    {ratio:.2f} ({target})")
