"""The overhead benchmark's CPU phase: server CPU per answered question, side by side.

The fake model writes each answer at once (its chunks come in bursts, as from a fast
endpoint or a loaded server), then paced (``PACED_S`` apart: every chunk is read, relayed
and sent before the next arrives). ragagent sends the deltas that queued while its stream
was sending as one message; the floor sends one per chunk. The burst figure holds the
target; the paced one, where nothing queues, shows what each chunk costs through
ragagent's layers against the floor's, and the messages per answer show how many were sent.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field

import grpc
from ragagent.v1 import agent_pb2_grpc

from tests.bench.overhead_load import QUESTIONS, ask, median, set_shape
from tests.bench.overhead_phases import Figure, Rounds, Size, rotated
from tests.bench.sides import Side, instructions, perf_counts
from tests.processes import ModelProcess

PACED_S = 0.002  # between chunks: ~20x what a chunk costs ragagent to relay on a 2-core VM
MS = 1000.0


@dataclass
class _Turns:
    """Per-side CPU per question and answer messages per question, of one shape."""

    cpu: Rounds = field(default_factory=Rounds)
    messages: Rounds = field(default_factory=Rounds)
    unanswered: Counter[str] = field(default_factory=Counter)


async def cpu(
    sides: dict[str, Side], model: ModelProcess, size: Size, *, against: str | None = None
) -> list[Figure]:
    """CPU per answered question, the sides taking turns question by question (each asks
    the same question, in a rotating order, over a channel of its own kept open): a 2-core
    VM's speed drifts by 20 % within seconds, and rounds of several questions per side
    compared rounds run at different speeds (three runs of identical code: 1.17-1.39x). A
    ratio is the median over questions of the per-question ratio; a question one side did
    not answer is left out of every side's figures. ``against``: the git revision that the
    side named "before" runs (shown only: a comparison, not a target)."""
    n = size.cpu_rounds * size.questions
    paced_n = max(1, n // 4)
    print(f"  CPU: {n} questions per side at once and {paced_n} paced, taking turns")
    names = list(sides)
    channels = {name: grpc.aio.insecure_channel(side.target) for name, side in sides.items()}
    try:
        stubs = {name: agent_pb2_grpc.AgentServiceStub(c) for name, c in channels.items()}
        await set_shape(model.base_url, size.answer_chunks, 0.0)
        for name in names:
            for i in range(size.warm_questions):
                await ask(stubs[name], QUESTIONS[i % len(QUESTIONS)])
        async with contextlib.AsyncExitStack() as stack:
            # Instructions, unlike CPU seconds, hardly depend on the machine's other load:
            # counted over the burst's questions, side by side (where perf can count them).
            counting = perf_counts()
            counted = {
                name: await stack.enter_async_context(
                    instructions(side.server.pid, enabled=counting)
                )
                for name, side in sides.items()
            }
            burst = await _take_turns(sides, stubs, n)
        await set_shape(model.base_url, size.answer_chunks, PACED_S)
        paced = await _take_turns(sides, stubs, paced_n)
    finally:
        for channel in channels.values():
            await channel.close()
    for name in names:
        if burst.unanswered[name] == n:
            raise RuntimeError(f"{name} answered none of {n} questions")
    executed = {
        name: c.instructions / (n - burst.unanswered[name])
        for name, c in counted.items()
        if c.instructions is not None
    }
    note = f"; unanswered {dict(burst.unanswered)}" if burst.unanswered else ""
    t = burst.cpu
    measured = f"{t.median('ragagent') * MS:.1f} ms{note}"
    figures = [
        Figure(
            "server CPU per answered question vs the Agents SDK (agentic, one tool call)",
            measured,
            f"Agents SDK behind a minimal servicer {t.median('peer') * MS:.1f} ms",
            t.ratio("ragagent", "peer"),
            "<= 0.8x SDK",
            0.8,
        ),
        Figure(
            "server CPU per answered question vs bare",
            measured,
            f"bare floor {t.median('floor') * MS:.1f} ms",
            t.ratio("ragagent", "floor"),
            "<= 1.1x bare",
            1.1,
        ),
        _messages("answer messages per question", burst),
        Figure(
            f"server CPU per answered question vs bare, chunks {PACED_S * MS:g} ms apart",
            f"{paced.cpu.median('ragagent') * MS:.1f} ms",
            f"bare floor {paced.cpu.median('floor') * MS:.1f} ms",
            paced.cpu.ratio("ragagent", "floor"),
            "ratio, shown only",
        ),
        _messages("answer messages per question, paced", paced),
    ]
    figures += _against(t, measured, against)
    if executed:
        mega = 1e6
        figures.append(
            Figure(
                "server instructions per answered question vs bare (perf stat)",
                f"{executed['ragagent'] / mega:.1f} M",
                f"bare floor {executed['floor'] / mega:.1f} M, "
                f"Agents SDK {executed['peer'] / mega:.1f} M",
                executed["ragagent"] / executed["floor"],
                "<= 1.1x bare",
                1.1,
            )
        )
    return figures


async def _take_turns(
    sides: dict[str, Side], stubs: dict[str, agent_pb2_grpc.AgentServiceStub], n: int
) -> _Turns:
    """``n`` questions, each asked of every side in turn, in every order (6 questions, 3
    sides); each side's CPU read from its process around its own answer."""
    names = list(sides)
    turns = _Turns()
    for index in range(n):
        query = QUESTIONS[index % len(QUESTIONS)]
        spent: dict[str, float] = {}
        sent: dict[str, int] = {}
        failed = False
        for name in rotated(names, index + index // len(QUESTIONS)):
            before = sides[name].cpu()
            answer = await ask(stubs[name], query)
            spent[name] = sides[name].cpu() - before
            sent[name] = answer.deltas
            if not answer.answered:
                turns.unanswered[name] += 1
                failed = True
        if not failed:
            for name in names:
                turns.cpu.add(name, spent[name])
                turns.messages.add(name, sent[name])
    return turns


def _messages(name: str, turns: _Turns) -> Figure:
    """Answer deltas a caller received per question: ragagent's against the floor's."""
    m = turns.messages
    return Figure(
        name,
        f"{median(m.values['ragagent']):.0f}",
        f"bare floor {median(m.values['floor']):.0f}",
        m.ratio("ragagent", "floor"),
        "shown only",
    )


def _against(t: Rounds, measured: str, revision: str | None) -> list[Figure]:
    """ragagent against itself at ``revision`` (the side named "before"): shown only."""
    if revision is None:
        return []
    return [
        Figure(
            f"server CPU per answered question vs ragagent at {revision}",
            measured,
            f"{revision} {t.median('before') * MS:.1f} ms",
            t.ratio("ragagent", "before"),
            "(compared)",
        )
    ]
