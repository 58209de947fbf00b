"""Citation spans: what the lexical support check costs per answer (issue 27's budget:
at most 5 ms for an answer of 10 sentences, with five real-sized passages).

``python -m tests.bench citations``; quick (a second or two).
"""

from __future__ import annotations

import statistics
import time

from service.agent.spans import _indexed, citation_spans

_PASSAGE = (
    "ROS 2 uses DDS, the Data Distribution Service, as its middleware. Nodes publish and "
    "subscribe to topics; DDS discovers peers without a master process and offers quality "
    "of service settings such as reliability, durability and history depth. "
)
_CLAIMS = [
    "ROS 2 relies on DDS for discovery without a master",
    "Nodes exchange messages over topics",
    "Quality of service covers reliability and durability",
    "History depth bounds the queue of a topic",
    "A robot's battery lasts four hours",
]


def workload(sentences: int) -> tuple[str, dict[int, str]]:
    """An answer of ``sentences`` sentences citing five passages of about 2,000 characters."""
    passages = {n: f"Passage {n}. " + _PASSAGE * 9 for n in range(1, 6)}
    answer = " ".join(
        f"{_CLAIMS[i % len(_CLAIMS)]} [{i % 5 + 1}][{(i + 2) % 5 + 1}]." for i in range(sentences)
    )
    return answer, passages


def measure(sentences: int = 10, runs: int = 200, *, cold: bool = True) -> dict[str, float]:
    """Milliseconds per answer; ``cold``: no passage indexed before (every run's first
    answer over its sources), else the passages indexed already (a cache hit)."""
    answer, passages = workload(sentences)
    times = []
    for _ in range(runs):
        if cold:
            _indexed.cache_clear()
        began = time.perf_counter()
        citation_spans(answer, passages.get)
        times.append((time.perf_counter() - began) * 1000)
    times.sort()
    return {
        "p50 ms": round(statistics.median(times), 3),
        "p95 ms": round(times[int(0.95 * len(times)) - 1], 3),
    }


async def main() -> dict[str, object]:
    figures = measure(cold=True)
    warm = measure(cold=False)
    print(f"citation spans, passages indexed already: {warm}")
    verdict = "PASS" if figures["p95 ms"] <= 5.0 else "FAIL"
    print(f"citation spans, 10-sentence answer, 5 passages: {figures} (budget 5 ms) {verdict}")
    return {"cold": figures, "warm": warm}
