"""How fast the model endpoint answers, learned from recent runs, and the strategy that fits a
deadline.

Every model turn a run takes is timed (:class:`ModelTurns`): the wait for its first token (a
non-streamed turn: for the whole turn, which is when its first text arrives) and, for a
streamed turn, the time per token after it. Each model name of the endpoint keeps its last
:data:`WINDOW` figures; the estimate is their median, so one slow outlier (a cold cache, a
queue) moves it little and the endpoint getting slower or faster shows within a few calls.

With ``RAGAGENT_AGENT_STRATEGY=auto`` and a model endpoint, a request whose deadline leaves
less time than its strategy needs runs the fastest one that fits (:func:`fitting`):

- a turn needs the first-token time plus :data:`MIN_ANSWER_TOKENS` at the time per token;
- agentic (and agents_sdk) needs two turns (one that searches, one that answers);
  retrieve_first needs one; extractive needs no model at all.

Until a model has been timed nothing is downgraded: no guess stands in for a measurement.
A strategy chosen explicitly (any setting but auto) never changes.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

WINDOW = 8
# The shortest answer worth writing: a sentence with its citation.
MIN_ANSWER_TOKENS = 24
_TURNS = {"agentic": 2, "agents_sdk": 2, "retrieve_first": 1, "extractive": 0}
# Fastest last: the order in which a downgrade tries them.
_FALLBACKS = ("retrieve_first", "extractive")


@dataclass(frozen=True, slots=True)
class Downgrade:
    strategy: str
    reason: str


class EndpointLatency:
    """Recent first-token and per-token times, per model name of one endpoint."""

    def __init__(self, window: int = WINDOW) -> None:
        self._window = window
        self._first: dict[str, deque[float]] = {}
        self._per_token: dict[str, deque[float]] = {}

    def observe(
        self, model: str, first_token_s: float, tokens: int = 0, rest_s: float = 0.0
    ) -> None:
        """One turn: seconds to its first token; ``tokens`` written in ``rest_s`` after it."""
        self._first.setdefault(model, deque(maxlen=self._window)).append(max(0.0, first_token_s))
        if tokens > 1 and rest_s >= 0:
            self._per_token.setdefault(model, deque(maxlen=self._window)).append(
                rest_s / (tokens - 1)
            )

    def first_token_s(self, model: str) -> float | None:
        recent = self._first.get(model)
        return statistics.median(recent) if recent else None

    def per_token_s(self, model: str) -> float:
        recent = self._per_token.get(model)
        return statistics.median(recent) if recent else 0.0

    def turn_s(self, model: str) -> float | None:
        """What one minimal turn takes; None until the model has been timed."""
        first = self.first_token_s(model)
        if first is None:
            return None
        return first + MIN_ANSWER_TOKENS * self.per_token_s(model)


def fitting(
    strategy: str,
    remaining_s: float | None,
    latency: EndpointLatency,
    model: str,
    *,
    extractive: bool,
) -> Downgrade | None:
    """The fastest strategy that fits ``remaining_s`` when ``strategy`` does not; None when
    it fits, there is no deadline, or the model has not been timed yet. ``extractive``: the
    extractive strategy is available (an embedder)."""
    turn = latency.turn_s(model)
    if remaining_s is None or turn is None or strategy not in _TURNS:
        return None
    needed = _TURNS[strategy] * turn
    if remaining_s >= needed:
        return None
    for candidate in _FALLBACKS:
        if candidate == "extractive" and not extractive:
            continue
        if _TURNS[candidate] >= _TURNS[strategy]:
            continue
        if remaining_s >= _TURNS[candidate] * turn or candidate == "extractive":
            first = latency.first_token_s(model) or 0.0
            reason = (
                f"the deadline left {remaining_s:.2f} s and {strategy} needs about "
                f"{needed:.2f} s ({_TURNS[strategy]} model turns of {turn:.2f} s: the endpoint's "
                f"first token takes {first:.2f} s, the median of its recent calls, plus "
                f"{MIN_ANSWER_TOKENS} tokens); answered with {candidate}, the fastest that fits"
            )
            return Downgrade(candidate, reason)
    return None
