"""The overhead benchmark's harness still works: a tiny run of every phase, every side.

Not a speed test (the figures of a tiny run on a shared machine mean nothing and are not
judged): it proves that the fake model, ragagent, the floor and the Agents SDK peer start,
answer the same questions and are measured, and that the table and the JSON come out.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import grpc
import httpx
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from tests.bench import bench_overhead
from tests.bench.sides import (
    cpu_seconds,
    ingested,
    launch,
    peak_rss_mib,
    perf_counts,
    reset_peak_rss,
    revision_code,
)
from tests.processes import REPO, SMALL_CORPUS, clean_env, model_process

INSTRUCTIONS = "server instructions per answered question vs bare (perf stat)"


def small_corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    for relative, text in SMALL_CORPUS.items():
        (corpus / relative).parent.mkdir(parents=True, exist_ok=True)
        (corpus / relative).write_text(text)
    return corpus


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
    pid = os.getpid()
    before = cpu_seconds(pid)
    sum(i * i for i in range(2_000_000))
    assert cpu_seconds(pid) > before
    reset_peak_rss(pid)
    assert peak_rss_mib(pid) > 0


@pytest.mark.slow
async def test_a_tiny_run_measures_every_phase_on_every_side(tmp_path: Path) -> None:
    pytest.importorskip("agents", reason="the peer needs the agents-sdk extra")
    corpus = small_corpus(tmp_path)
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
        "answer messages per question",
        "server CPU per answered question vs bare, chunks 2 ms apart",
        "answer messages per question, paced",
        f"{streams} concurrent streams: completed",
        f"{streams} concurrent streams: first token p50 / p99",
        f"{streams} concurrent streams: peak RSS",
    } | ({INSTRUCTIONS} if perf_counts() else set())
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
    # The floor sends one message per model chunk; ragagent as many or fewer (queued as one).
    chunks = bench_overhead.TINY.answer_chunks
    for shape in ("answer messages per question", "answer messages per question, paced"):
        assert figures[shape]["baseline"] == f"bare floor {chunks}", figures[shape]
        assert 0 < float(figures[shape]["measured"]) <= chunks, figures[shape]
    if INSTRUCTIONS in figures:  # perf counted each side's instructions, each more than none
        assert figures[INSTRUCTIONS]["value"] > 0
        assert not figures[INSTRUCTIONS]["measured"].startswith("0.0 M")
    assert results["corpus"] == f"corpus ({len(SMALL_CORPUS)} chunks)"


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "mode"), [("floor", "agentic"), ("peer", "agentic")])
async def test_a_baseline_searches_before_it_answers(tmp_path: Path, kind: str, mode: str) -> None:
    """A baseline that skipped the search would flatter it: the floor and the SDK peer relay
    the model's tool call into the same retrieval and stream the answer after its sources."""
    if kind == "peer":
        pytest.importorskip("agents", reason="the peer needs the agents-sdk extra")
    corpus = small_corpus(tmp_path)
    prepared = ingested(corpus)
    with model_process(deltas=6, interval=0.0) as model:
        settings = {
            "llm_base_url": model.base_url,
            "llm_api_key": "test",
            "llm_model": bench_overhead.MODEL_NAME,
        }
        side = launch(kind, tmp_path / kind, prepared, mode, settings)
        try:
            async with grpc.aio.insecure_channel(side.target) as channel:
                stub = agent_pb2_grpc.AgentServiceStub(channel)
                query = agent_pb2.QuestionRequest(query="What does a URDF file describe?")
                events = [e async for e in stub.AskStream(query, timeout=60)]
        finally:
            side.server.stop()
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "run_started"
    assert kinds[-1] == "completed"
    assert kinds.index("sources_found") < kinds.index("answer_delta")
    found = next(e.sources_found for e in events if e.HasField("sources_found"))
    assert any("URDF" in s.content for s in found.sources)
    answer = "".join(e.answer_delta.text for e in events if e.HasField("answer_delta"))
    assert answer == events[-1].completed.answer
    assert answer.endswith("as the source says [1].")
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


def test_cpu_seconds_to_the_nanosecond_agree_with_the_clock_ticks() -> None:
    from tests.bench import sides

    pid = os.getpid()
    ticks = sides._TICK_S

    def both() -> tuple[float, float]:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return sides.cpu_seconds(pid), (int(fields[11]) + int(fields[12])) * ticks

    first, first_ticks = both()
    sum(i * i for i in range(3_000_000))
    second, second_ticks = both()
    spent = second - first
    assert spent > 0.05
    assert abs(spent - (second_ticks - first_ticks)) < 0.03 + 0.1 * spent


def test_another_revision_runs_from_its_own_exported_code() -> None:
    tree, generated = revision_code("HEAD")
    assert (tree / "service" / "__init__.py").is_file()
    assert (generated / "ragagent" / "v1" / "agent_pb2.py").is_file()
    assert revision_code("HEAD") == [tree, generated]  # exported once
    path = clean_env(code=[tree, generated])["PYTHONPATH"].split(os.pathsep)
    assert path[:2] == [str(tree), str(generated)]
    assert path[-1] == str(REPO)
    with pytest.raises(ValueError, match="not a commit"):
        revision_code("no-such-revision-anywhere")


@pytest.mark.slow
async def test_the_cpu_phase_compares_against_another_revision(tmp_path: Path) -> None:
    """``--against REV``: ragagent at REV is one more side of the CPU phase, shown only."""
    pytest.importorskip("agents", reason="the peer needs the agents-sdk extra")
    corpus = small_corpus(tmp_path)

    results = await bench_overhead.run(
        bench_overhead.TINY, corpus, "tiny", phases=frozenset({"cpu"}), against="HEAD"
    )

    figures = {f["name"]: f for f in results["stores"]["sqlite"]["figures"]}
    compared = figures["server CPU per answered question vs ragagent at HEAD"]
    assert math.isfinite(compared["value"])
    assert compared["value"] > 0
    assert compared["verdict"] == ""
    assert compared["baseline"].startswith("HEAD ")
