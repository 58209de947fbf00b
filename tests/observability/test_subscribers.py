"""Subscribers: every event of a run reaches each listener's subscriber, of the answer's
deltas only the first (it marks the first token; the text comes with Completed)."""

from __future__ import annotations

from service.agent.events import AgentEvent, AnswerDelta, Heartbeat
from service.observability.runs import RunSubscriber, Subscribers


class Recorder:
    def __init__(self) -> None:
        self.events: list[AgentEvent] = []
        self.ends: list[BaseException | None] = []
        self.strategies: list[str] = []

    def run_started(self, strategy: str) -> RunSubscriber:
        self.strategies.append(strategy)
        return self

    def event(self, event: AgentEvent) -> None:
        self.events.append(event)

    def ended(self, error: BaseException | None) -> None:
        self.ends.append(error)


def test_each_subscriber_sees_the_first_delta_and_every_other_event_then_one_end() -> None:
    first, second = Recorder(), Recorder()
    subscribers = Subscribers([first, second], "agentic")
    beat = Heartbeat(1.0, "model")
    for event in (AnswerDelta("A"), AnswerDelta("B"), beat, AnswerDelta("C")):
        subscribers.event(event)
    subscribers.ended(None)
    subscribers.ended(RuntimeError("late"))

    for recorder in (first, second):
        assert recorder.strategies == ["agentic"]
        assert recorder.events == [AnswerDelta("A"), beat]
        assert recorder.ends == [None]
