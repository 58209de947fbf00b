"""The overhead benchmark's harness still works: a tiny run of every phase, every side.

Not a speed test (the figures of a tiny run on a shared machine mean nothing and are not
judged): it proves that the fake model, ragagent, the floor and the Agents SDK peer start,
answer the same questions and are measured, and that the table and the JSON come out.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest

from tests.bench import bench_overhead
from tests.bench.sides import cpu_seconds, peak_rss_mib, reset_peak_rss
from tests.processes import SMALL_CORPUS, model_process


def test_the_fake_model_changes_its_answers_on_request() -> None:
    with model_process(deltas=3, interval=0.0) as model:
        control = model.base_url.removesuffix("/v1") + "/bench/shape"
        assert httpx.post(control, json={"deltas": 7, "interval": 0}).json() == {
            "deltas": 7,
            "interval": 0.0,
        }
        with httpx.stream(
            "POST",
            f"{model.base_url}/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        ) as reply:
            events = [json.loads(line[6:]) for line in reply.iter_lines() if line[6:7] == "{"]
        assert sum(bool(e["choices"][0]["delta"].get("content")) for e in events) == 7
        assert httpx.post(control, json={"deltas": 0}).status_code == 400


def test_process_figures_come_from_proc() -> None:
    import os

    pid = os.getpid()
    before = cpu_seconds(pid)
    sum(i * i for i in range(2_000_000))
    assert cpu_seconds(pid) > before
    reset_peak_rss(pid)
    assert peak_rss_mib(pid) > 0


@pytest.mark.slow
async def test_a_tiny_run_measures_every_phase_on_every_side(tmp_path: Path) -> None:
    pytest.importorskip("agents", reason="the peer needs the agents-sdk extra")
    corpus = tmp_path / "corpus"
    for relative, text in SMALL_CORPUS.items():
        (corpus / relative).parent.mkdir(parents=True, exist_ok=True)
        (corpus / relative).write_text(text)
    out = tmp_path / "figures.json"

    results = await bench_overhead.run(bench_overhead.TINY, corpus, "tiny", out)

    assert json.loads(out.read_text()) == results
    figures = {f["name"]: f for f in results["stores"]["sqlite"]["figures"]}
    streams = bench_overhead.TINY.streams[0]
    assert set(figures) == {
        "first token added beyond retrieval, p50 (retrieve_first)",
        "retrieval p50 incl. query embedding (as the runs report it)",
        "first token p50 (retrieve_first)",
        f"relay of {bench_overhead.TINY.relay_chunks:,} streamed chunks",
        "server CPU per answered question vs the Agents SDK (agentic, one tool call)",
        "server CPU per answered question vs bare",
        f"{streams} concurrent streams: completed",
        f"{streams} concurrent streams: first token p50 / p99",
        f"{streams} concurrent streams: peak RSS",
    }
    for figure in figures.values():
        assert math.isfinite(figure["value"]), figure
        assert figure["verdict"] in ("PASS", "MISS", ""), figure
    # Every stream of both sides was answered, and the SDK peer answered too (its CPU per
    # answered question is a number, not a division by no answer).
    assert figures[f"{streams} concurrent streams: completed"]["value"] == 1.0
    assert figures[f"{streams} concurrent streams: completed"]["baseline"].endswith(
        f"{streams} of {streams}"
    )
    assert "unanswered" not in figures["server CPU per answered question vs bare"]["measured"]
    assert results["corpus"] == f"corpus ({len(SMALL_CORPUS)} chunks)"
