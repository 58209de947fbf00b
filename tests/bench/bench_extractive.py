"""The extractive strategy's first answer delta against retrieve_first's retrieval time.

Both run through the Agent over the same store, question by question, interleaved: for
retrieve_first the time from the start of the run to its sources (SourcesFound; the model
after it is an instant scripted fake, not measured), for extractive the time to its first
AnswerDelta. Target (issue 14): the extractive first delta no later than retrieve_first's
retrieval time + 50 ms, at p50. The book is ingested here, so its chunks carry piece vectors
and ranking needs no model call. Measured twice: "cold", a new agent per question (nothing
remembered), and "warm", one agent for all questions in turn (what a serving process sees).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from service.agent import AgentRequest, AnswerDelta, SourcesFound
from service.agent.orchestrator import Agent
from service.config import Settings
from service.configs import agent_config
from service.evaluation import load_questions
from service.ingest.loader import load_documents
from service.ingest.pipeline import Ingestor
from service.runtime import Runtime
from tests.bench.common import ROOT, corpus, report
from tests.fakes.chat_model import FakeChatModel, Scripted

QUESTIONS = ROOT / "tests" / "eval" / "questions.jsonl"
FALLBACK = (
    "How do ROS 2 nodes exchange messages?",
    "What does a URDF file describe?",
    "Which GPU do I need for Isaac Sim?",
    "How does Whisper turn speech into commands?",
)
TARGET_MS = 50.0


async def _time_to(agent: Agent, question: str, event: type) -> float | None:
    """Seconds from the start of a run to its first ``event``; the rest of the run is read
    to its end, so that nothing of it overlaps the next measurement."""
    started = time.perf_counter()
    seen: float | None = None
    async for item in agent.run(AgentRequest(query=question)):
        if seen is None and isinstance(item, event):
            seen = time.perf_counter() - started
    return seen


def _p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"p50 {_p50_ms(samples):.1f} ms, p95 {p95 * 1000:.1f} ms ({len(samples)} questions)"


async def main() -> None:
    root, name = corpus()
    questions = (
        [q.question for q in load_questions(QUESTIONS) if q.answerable]
        if name == "physical-ai-book"
        else list(FALLBACK)
    )
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), log_level="WARNING")
        runtime = await Runtime.open(settings)
        try:
            await Ingestor(runtime.embedder, runtime.store).ingest(load_documents(root))
            model = FakeChatModel(
                *[Scripted(text="An answer [1].") for _ in range(3 * len(questions))]
            )

            def agent(strategy: str) -> Agent:
                return Agent(
                    agent_config(settings),
                    retriever=runtime.store,
                    model=model,
                    embedder=runtime.embedder,
                    strategy=strategy,  # type: ignore[arg-type]
                )

            retrieval: list[float] = []
            cold: list[float] = []
            warm: list[float] = []
            warm_agent = agent("extractive")
            retrieve_first = agent("retrieve_first")
            await _time_to(warm_agent, "warm-up: what is ROS 2?", AnswerDelta)  # loads the model
            for question in questions:
                found = await _time_to(retrieve_first, question, SourcesFound)
                first = await _time_to(agent("extractive"), question, AnswerDelta)
                again = await _time_to(warm_agent, question, AnswerDelta)
                if found is None or first is None or again is None:
                    continue  # nothing retrieved: no answer to time
                retrieval.append(found)
                cold.append(first)
                warm.append(again)
        finally:
            await runtime.close()
    print(f"corpus: {name}")
    base = _p50_ms(retrieval)
    for label, samples in (("cold", cold), ("warm", warm)):
        report(
            f"extractive first delta ({label})",
            _summary(samples),
            f"retrieve_first retrieval: {_summary(retrieval)}",
            _p50_ms(samples) / base,
            f"p50 {_p50_ms(samples) - base:+.1f} ms against it; target <= +{TARGET_MS:.0f} ms",
        )
