"""Every tool call goes PENDING, then EXECUTING, then one end status (ToolCallStatus in
types.proto, the event order of AskStreamResponse): whether it completes, fails on bad
arguments or a failing store, or runs out of time; and the calls a model asks for in one
turn are all PENDING before the first one executes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from service.agent import AgentEvent, ToolCallCompleted, ToolCallPending, ToolCallStarted
from service.domain import Deadline, ResponseStatus, ToolCallStatus
from service.errors import StoreUnavailable
from tests.agent.conftest import AgentFactory
from tests.agent.support import (
    FakeRetriever,
    check_events,
    chunk,
    collect,
    completed,
    failed,
    request,
)
from tests.fakes.openai_server import ChatReply, FakeOpenAI, ToolCallScript

QUESTION = "What is a URDF link?"
LINK = chunk("urdf-link", "A link is a rigid body with inertia, visual and collision elements.")

PENDING, EXECUTING = ToolCallStatus.PENDING, ToolCallStatus.EXECUTING


def lifecycles(events: Sequence[AgentEvent]) -> dict[str, list[ToolCallStatus]]:
    """Each call's statuses, in the order its events came."""
    seen: dict[str, list[ToolCallStatus]] = defaultdict(list)
    for event in events:
        if isinstance(event, ToolCallPending | ToolCallStarted | ToolCallCompleted):
            seen[event.call.id].append(event.call.status)
    return dict(seen)


def tool_events(events: Sequence[AgentEvent]) -> list[tuple[str, str]]:
    return [
        (type(e).__name__, e.call.id)
        for e in events
        if isinstance(e, ToolCallPending | ToolCallStarted | ToolCallCompleted)
    ]


async def test_completed_and_failed_calls_go_pending_executing_then_end(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.add("links", (LINK, 0.9))
    fake_openai.script_chat(
        ChatReply.calls(
            ToolCallScript("qdrant_retrieval", '{"query": "links"}', id="ok"),
            ToolCallScript("qdrant_retrieval", "{query: links", id="bad_json"),
            ToolCallScript("web_search", '{"query": "links"}', id="unknown_tool"),
        ),
        ChatReply.text("Rigid bodies [1]."),
    )

    events = await collect(build_agentic(retriever).run(request(QUESTION)))

    check_events(events)
    cycles = lifecycles(events)
    (service_call,) = [c for c in cycles if c.startswith("srv_")]
    assert cycles == {
        service_call: [PENDING, EXECUTING, ToolCallStatus.COMPLETED],
        "ok": [PENDING, EXECUTING, ToolCallStatus.COMPLETED],
        "bad_json": [PENDING, EXECUTING, ToolCallStatus.ERROR],
        "unknown_tool": [PENDING, EXECUTING, ToolCallStatus.ERROR],
    }
    # The model's three calls are announced together before any of them runs.
    model_events = [e for e in tool_events(events) if not e[1].startswith("srv_")]
    assert [kind for kind, _ in model_events[:3]] == ["ToolCallPending"] * 3
    pending = next(e for e in events if isinstance(e, ToolCallPending) and e.call.id == "ok")
    assert pending.call.started_at is None
    assert completed(events).result.status is ResponseStatus.SUCCESS


async def test_a_call_that_runs_out_of_time_goes_pending_executing_timeout(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.delays["links"] = 5.0
    fake_openai.script_chat(
        ChatReply.calls(ToolCallScript("qdrant_retrieval", '{"query": "links"}', id="slow")),
        ChatReply.text("never sent"),
    )

    events = await collect(
        build_agentic(retriever).run(request(QUESTION, deadline=Deadline.after(0.5)))
    )

    check_events(events)
    assert lifecycles(events)["slow"] == [PENDING, EXECUTING, ToolCallStatus.TIMEOUT]
    assert completed(events).result.status is ResponseStatus.TIMEOUT


async def test_a_call_the_store_fails_goes_pending_executing_error(
    fake_openai: FakeOpenAI, build_agentic: AgentFactory
) -> None:
    class BrokenStore(FakeRetriever):
        async def search(self, query: str, **kwargs: object) -> list:  # type: ignore[type-arg]
            raise StoreUnavailable("qdrant is down")

    events = await collect(build_agentic(BrokenStore()).run(request(QUESTION)))

    failed(events, StoreUnavailable)
    (cycle,) = lifecycles(events).values()
    assert cycle == [PENDING, EXECUTING, ToolCallStatus.ERROR]


async def test_calls_still_pending_when_a_sibling_fails_are_ended_too(
    fake_openai: FakeOpenAI, build_agentic: AgentFactory
) -> None:
    """One of a turn's calls breaks the run: every call of the turn still gets an end."""

    class HalfBroken(FakeRetriever):
        async def search(self, query: str, **kwargs: object) -> list:  # type: ignore[type-arg]
            if query == "breaks":
                raise StoreUnavailable("qdrant is down")
            return await super().search(query, **kwargs)  # type: ignore[arg-type]

    retriever = HalfBroken()
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.add("works", (LINK, 0.9))
    retriever.delays["works"] = 1.0
    fake_openai.script_chat(
        ChatReply.calls(
            ToolCallScript("qdrant_retrieval", '{"query": "breaks"}', id="first"),
            ToolCallScript("qdrant_retrieval", '{"query": "works"}', id="second"),
        )
    )

    events = await collect(build_agentic(retriever).run(request(QUESTION)))

    failed(events, StoreUnavailable)
    cycles = lifecycles(events)
    assert cycles["first"] == [PENDING, EXECUTING, ToolCallStatus.ERROR]
    assert cycles["second"][:2] == [PENDING, EXECUTING]
    assert cycles["second"][2] is ToolCallStatus.ERROR
    assert len(cycles["second"]) == 3
