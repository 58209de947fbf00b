"""The phases of the overhead benchmark (bench_overhead.py): each runs against servers
already started, the sides taking turns, and returns its figures."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import grpc
import openai
from ragagent.v1 import agent_pb2_grpc

from tests.bench.overhead_load import (
    QUESTIONS,
    Answer,
    ask,
    ask_at_once,
    ask_in_turn,
    direct_first_token,
    median,
    p,
    set_shape,
)
from tests.bench.sides import Side
from tests.processes import ModelProcess

MODEL_NAME = "fake-model"


@dataclass(frozen=True)
class Size:
    rounds: int
    questions: int  # per side and round, in the first-token and CPU phases
    short_chunks: int  # answer of the first-token phase
    relay_chunks: int
    relay_streams: int  # per side and round
    answer_chunks: int  # agentic answer of the CPU phase (~150 tokens)
    streams: tuple[int, ...]
    stream_chunks: int
    stream_interval: float
    stream_rounds: int
    stores: tuple[str, ...]
    # The CPU phase's rounds: its ratio is the median of per-round ratios, and a round of a
    # few questions varies by 5-10 % on a 2-core VM (three quick runs gave 1.17-1.39x).
    cpu_rounds: int
    warm_questions: int  # per side before the CPU phase (caches, pools, the session file)


@dataclass
class Figure:
    """One compared figure; ``value`` is checked against ``bound`` (None: shown only)."""

    name: str
    measured: str
    baseline: str
    value: float
    target: str
    bound: float | None = None
    at_least: bool = False  # the target is a floor, not a ceiling

    @property
    def verdict(self) -> str:
        if self.bound is None:
            return ""
        met = self.value >= self.bound if self.at_least else self.value <= self.bound
        return "PASS" if met else "MISS"


@dataclass
class Rounds:
    """Per-side values, one per round."""

    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, side: str, value: float) -> None:
        self.values.setdefault(side, []).append(value)

    def median(self, side: str) -> float:
        return median(self.values[side])

    def ratio(self, side: str, baseline: str) -> float:
        """Median over rounds of the per-round ratio."""
        pairs = zip(self.values[side], self.values[baseline], strict=True)
        return median([a / b for a, b in pairs])


def unanswered(codes: Counter[str]) -> str:
    return f" (not answered: {dict(codes.most_common())})" if codes else ""


def rotated(names: list[str], round_: int) -> list[str]:
    k = round_ % len(names)
    return names[k:] + names[:k]


def first_deltas(side: str, answers: list[Answer]) -> list[float]:
    missing = [a.code for a in answers if a.first_delta is None or not a.answered]
    if missing:
        raise RuntimeError(f"{side}: {len(missing)} of {len(answers)} unanswered ({missing[:5]})")
    return [a.first_delta for a in answers if a.first_delta is not None]


async def interleave(
    rounds: int, actions: Mapping[str, Callable[[int], Awaitable[float]]]
) -> Rounds:
    """Each round, every action in a rotating order; an action gets the round, gives a value."""
    result = Rounds()
    for round_ in range(rounds):
        for name in rotated(list(actions), round_):
            result.add(name, await actions[name](round_))
    return result


async def first_token(rag: Side, floor: Side, model: ModelProcess, size: Size) -> list[Figure]:
    """Question by question, the three in a rotating order, so that the samples compared
    saw the same load (on a shared machine the direct call alone ranges over 100x)."""
    print(f"  first token: {size.rounds} rounds of {size.questions} questions per side")
    await set_shape(model.base_url, size.short_chunks, 0.0)
    async with (
        grpc.aio.insecure_channel(rag.target) as rag_channel,
        grpc.aio.insecure_channel(floor.target) as floor_channel,
        openai.AsyncOpenAI(base_url=model.base_url, api_key="bench", max_retries=0) as client,
    ):
        stubs = {
            "ragagent": agent_pb2_grpc.AgentServiceStub(rag_channel),
            "floor": agent_pb2_grpc.AgentServiceStub(floor_channel),
        }

        async def one(name: str, query: str) -> Answer:
            if name == "direct":
                first = await direct_first_token(client, MODEL_NAME, query)
                return Answer(first, first, 1, True, "OK")
            answer = await ask(stubs[name], query)
            first_deltas(name, [answer])
            return answer

        for name in ("ragagent", "floor", "direct"):  # warm-up: connections, first calls
            await one(name, QUESTIONS[0])
        t, retrieval, beyond = Rounds(), Rounds(), Rounds()
        for round_ in range(size.rounds):
            seen: dict[str, list[Answer]] = {"ragagent": [], "floor": [], "direct": []}
            for i in range(size.questions):
                query = QUESTIONS[(round_ * size.questions + i) % len(QUESTIONS)]
                for name in rotated(list(seen), round_ * size.questions + i):
                    seen[name].append(await one(name, query))
            for name, answers in seen.items():
                t.add(name, median([a.first_delta or 0.0 for a in answers]))
            # ragagent's runs say what their retrieval took (query embedding and search):
            # what it adds beyond retrieval is taken question by question.
            took = [a.retrieval for a in seen["ragagent"]]
            if None in took:
                raise RuntimeError("ragagent did not report the retrieval time of every run")
            retrieval.add("ragagent", median([x or 0.0 for x in took]))
            pairs = zip(seen["ragagent"], seen["direct"], strict=True)
            beyond.add(
                "ragagent",
                median(
                    [
                        (r.first_delta or 0) - (r.retrieval or 0) - (d.first_delta or 0)
                        for r, d in pairs
                    ]
                ),
            )
    v = t.values
    added = [a - d for a, d in zip(v["ragagent"], v["direct"], strict=True)]
    floor_added = [a - d for a, d in zip(v["floor"], v["direct"], strict=True)]
    ms = 1000.0
    took_ms = retrieval.median("ragagent") * ms
    return [
        Figure(
            "first token added beyond retrieval, p50 (retrieve_first)",
            f"+{median(added) * ms:.1f} ms over the direct call (retrieval {took_ms:.1f} ms of it)",
            f"direct call {t.median('direct') * ms:.1f} ms; bare floor "
            f"+{median(floor_added) * ms:.1f} ms",
            beyond.median("ragagent") * ms,
            "<= 10 ms",
            10.0,
        ),
        Figure(
            "retrieval p50 incl. query embedding (as the runs report it)",
            f"{took_ms:.2f} ms",
            "",
            took_ms,
            "<= 10 ms",
            10.0,
        ),
        Figure(
            "first token p50 (retrieve_first)",
            f"{t.median('ragagent') * ms:.1f} ms",
            f"bare floor {t.median('floor') * ms:.1f} ms",
            t.ratio("ragagent", "floor"),
            "ratio, shown only",
        ),
    ]


async def relay(rag: Side, floor: Side, model: ModelProcess, size: Size) -> list[Figure]:
    print(f"  relay: {size.rounds} rounds of {size.relay_streams} answers per side")
    await set_shape(model.base_url, size.relay_chunks, 0.0)

    async def on(side: Side, round_: int) -> float:
        answers = await ask_in_turn(side.target, size.relay_streams, round_)
        first_deltas(side.name, answers)
        return median([size.relay_chunks / (a.end - (a.first_delta or 0.0)) for a in answers])

    await on(rag, 0)
    await on(floor, 0)
    t = await interleave(
        size.rounds, {"ragagent": lambda r: on(rag, r), "floor": lambda r: on(floor, r)}
    )
    return [
        Figure(
            f"relay of {size.relay_chunks:,} streamed chunks",
            f"{t.median('ragagent'):,.0f} chunks/s",
            f"bare grpc.aio relay {t.median('floor'):,.0f} chunks/s",
            t.ratio("ragagent", "floor"),
            ">= 0.95x bare",
            0.95,
            at_least=True,
        )
    ]


async def concurrency(rag: Side, floor: Side, model: ModelProcess, size: Size) -> list[Figure]:
    await set_shape(model.base_url, size.stream_chunks, size.stream_interval)
    figures = []
    for n in size.streams:
        figures += await streams_at_once(rag, floor, n, size.stream_rounds)
    return figures


async def streams_at_once(rag: Side, floor: Side, n: int, rounds: int) -> list[Figure]:
    print(f"  {n} concurrent streams: {rounds} rounds per side")
    p50, p99, rss, done = Rounds(), Rounds(), Rounds(), Rounds()
    failed: dict[str, Counter[str]] = {"ragagent": Counter(), "floor": Counter()}

    async def on(side: Side) -> float:
        side.reset_peak()
        answers = await ask_at_once(side.target, n)
        rss.add(side.name, side.peak_rss())
        seen = [a.first_delta for a in answers if a.first_delta is not None]
        p50.add(side.name, median(seen) if seen else float("inf"))
        p99.add(side.name, p(seen, 0.99) if seen else float("inf"))
        done.add(side.name, sum(a.answered for a in answers))
        failed[side.name].update(a.code for a in answers if not a.answered)
        await asyncio.sleep(1.0)  # the streams' ends settle before the next side starts
        return 0.0

    await interleave(rounds, {"ragagent": lambda r: on(rag), "floor": lambda r: on(floor)})
    total = n * rounds
    rag_done, floor_done = sum(done.values["ragagent"]), sum(done.values["floor"])
    return [
        Figure(
            f"{n} concurrent streams: completed",
            f"{rag_done:.0f} of {total}{unanswered(failed['ragagent'])}",
            f"bare floor {floor_done:.0f} of {total}{unanswered(failed['floor'])}",
            rag_done / total,
            "all",
            1.0,
            at_least=True,
        ),
        Figure(
            f"{n} concurrent streams: first token p50 / p99",
            f"{p50.median('ragagent'):.2f} s / {p99.median('ragagent'):.2f} s",
            f"bare floor {p50.median('floor'):.2f} s / {p99.median('floor'):.2f} s",
            p99.ratio("ragagent", "floor"),
            "p99 <= 1.1x bare",
            1.1,
        ),
        Figure(
            f"{n} concurrent streams: peak RSS",
            f"{rss.median('ragagent'):.0f} MiB",
            f"bare floor {rss.median('floor'):.0f} MiB",
            rss.ratio("ragagent", "floor"),
            "<= 1.1x bare",
            1.1,
        ),
    ]
