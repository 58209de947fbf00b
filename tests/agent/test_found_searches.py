"""A run searches the store once per distinct search (issue 15): the model's search for the
question the run has just searched for itself, with the same top_k, is answered with the
run's sources, yet reported and recorded as a call of its own; so is a search for fewer
results, where the retriever promises that those are the first of its results. Both
strategies in which the model calls the tool."""

from __future__ import annotations

import json

from service.agent import SourcesFound, ToolCallCompleted, ToolCallPending, ToolCallStarted
from service.domain import SearchFilters, ToolCallStatus
from tests.agent.conftest import AgentFactory
from tests.agent.support import FakeRetriever, check_events, chunk, collect, completed, request
from tests.fakes.openai_server import ChatReply, FakeOpenAI, ToolCallScript

QUESTION = "What is a URDF link?"
LINK = chunk("urdf-link", "A link is a rigid body with inertia, visual and collision elements.")
JOINT = chunk("urdf-joint", "A joint connects two links and says how they move.")


def search(query: str, id: str, top_k: int | None = None) -> ToolCallScript:
    arguments: dict[str, object] = {"query": query}
    if top_k is not None:
        arguments["top_k"] = top_k
    return ToolCallScript("qdrant_retrieval", json.dumps(arguments), id=id)


def retriever() -> FakeRetriever:
    found = FakeRetriever()
    found.add(QUESTION, (LINK, 0.8), (JOINT, 0.5))
    found.add("joints", (JOINT, 0.9))
    return found


async def test_the_models_search_for_the_question_is_answered_without_searching_again(
    fake_openai: FakeOpenAI, build_agentic: AgentFactory
) -> None:
    store = retriever()
    fake_openai.script_chat(
        ChatReply.calls(search(QUESTION, "call_1")),  # top_k defaults to max_results, 5
        ChatReply.text("A link is a rigid body [1], moved by joints [2]."),
    )
    events = await collect(build_agentic(store).run(request(QUESTION, max_results=5)))

    check_events(events)
    assert store.queries == [QUESTION]  # one store search for two retrieval calls
    result = completed(events).result
    service, model = result.tool_calls
    assert (service.origin, model.origin, model.id) == ("service", "model", "call_1")
    assert model.status is ToolCallStatus.COMPLETED
    assert model.result == service.result
    assert model.result is not None
    assert model.result["hits"] == 2
    # The model's call has its own events, and its sources keep the run's numbers.
    for kind in (ToolCallPending, ToolCallStarted, ToolCallCompleted):
        assert [e.call.id for e in events if isinstance(e, kind)][1] == "call_1"
    found = {e.tool_call_id: e.sources for e in events if isinstance(e, SourcesFound)}
    assert found["call_1"] == found[service.id]
    assert [s.citation for s in found["call_1"]] == [1, 2]
    assert [(s.citation, s.hit.chunk.chunk_id) for s in result.sources] == [
        (1, LINK.chunk_id),
        (2, JOINT.chunk_id),
    ]
    # What the model read is the passages of the run's search.
    tool_message = fake_openai.chat_requests[1].messages[-1]
    assert tool_message["role"] == "tool"
    assert "[1] Urdf Link" in tool_message["content"]
    assert "[2] Urdf Joint" in tool_message["content"]


async def test_another_query_or_top_k_is_searched_without_the_retrievers_promise(
    fake_openai: FakeOpenAI, build_agentic: AgentFactory
) -> None:
    store = retriever()
    fake_openai.script_chat(
        ChatReply.calls(search("joints", "call_1"), search(QUESTION, "call_2", top_k=1)),
        ChatReply.calls(search("joints", "call_3")),
        ChatReply.text("Joints move links [2]."),
    )
    events = await collect(build_agentic(store).run(request(QUESTION, max_results=5)))

    check_events(events)
    # The run's own search; "joints" once for two calls; the question again with top_k 1.
    assert sorted((c.query, c.limit) for c in store.calls) == [
        (QUESTION, 1),
        (QUESTION, 5),
        ("joints", 5),
    ]
    calls = completed(events).result.tool_calls
    assert [c.status for c in calls] == [ToolCallStatus.COMPLETED] * 4
    assert calls[3].result == calls[1].result
    assert calls[2].result is not None
    assert calls[2].result["hits"] == 1
    # The chunk found by several searches keeps the one number it was given first.
    found = [e for e in events if isinstance(e, SourcesFound)]
    numbers = {s.hit.chunk.chunk_id: s.citation for e in found for s in e.sources}
    assert numbers == {LINK.chunk_id: 1, JOINT.chunk_id: 2}


async def test_the_runs_filters_and_threshold_are_part_of_what_is_reused(
    fake_openai: FakeOpenAI, build_agentic: AgentFactory
) -> None:
    store = retriever()
    fake_openai.script_chat(
        ChatReply.calls(search(QUESTION, "call_1")),
        ChatReply.text("A link [1]."),
        ChatReply.calls(search(QUESTION, "call_2")),
        ChatReply.text("A link [1]."),
    )
    agent = build_agentic(store)
    filters = SearchFilters(module="robots")
    await collect(agent.run(request(QUESTION, filters=filters, threshold=0.6)))
    await collect(agent.run(request(QUESTION, threshold=0.4)))

    # Each run searches once, with its own filters and threshold; runs share nothing.
    assert [(c.query, c.filters, c.threshold) for c in store.calls] == [
        (QUESTION, filters, 0.6),
        (QUESTION, None, 0.4),
    ]


async def test_a_search_that_found_nothing_is_reused_too(
    fake_openai: FakeOpenAI, build_agentic: AgentFactory
) -> None:
    store = retriever()
    fake_openai.script_chat(
        ChatReply.calls(search("nothing here", "call_1")),
        ChatReply.calls(search("nothing here", "call_2")),
        ChatReply.text("A link [1]."),
    )
    events = await collect(build_agentic(store).run(request(QUESTION)))

    check_events(events)
    # An empty search is a completed one: reused, reported with no SourcesFound.
    assert store.queries == [QUESTION, "nothing here"]
    calls = completed(events).result.tool_calls
    assert [c.result["hits"] for c in calls if c.result is not None] == [2, 0, 0]


async def test_a_smaller_top_k_is_answered_with_the_first_hits_of_the_runs_search(
    fake_openai: FakeOpenAI, build_agentic: AgentFactory
) -> None:
    store = retriever()
    fake_openai.script_chat(
        ChatReply.calls(search(QUESTION, "call_1", top_k=1)),
        ChatReply.text("A link is a rigid body [1]."),
    )
    agent = build_agentic(store, consistent_limit=5)
    events = await collect(agent.run(request(QUESTION, max_results=5)))

    check_events(events)
    assert store.queries == [QUESTION]  # the model's top 1 is the run's first hit
    service, model = completed(events).result.tool_calls
    assert model.status is ToolCallStatus.COMPLETED
    assert service.result is not None
    assert model.result is not None
    assert model.result == {"hits": 1, "sources": service.result["sources"][:1]}
    found = {e.tool_call_id: e.sources for e in events if isinstance(e, SourcesFound)}
    assert [(s.citation, s.hit.chunk.chunk_id) for s in found["call_1"]] == [(1, LINK.chunk_id)]
    # The model read that one passage only, under the number the run gave it.
    tool_message = fake_openai.chat_requests[1].messages[-1]["content"]
    assert "[1] Urdf Link" in tool_message
    assert "[2]" not in tool_message


async def test_a_larger_top_k_or_one_past_the_promise_is_searched(
    fake_openai: FakeOpenAI, build_agentic: AgentFactory
) -> None:
    store = retriever()
    fake_openai.script_chat(
        ChatReply.calls(search("joints", "call_1", top_k=1)),
        ChatReply.calls(search("joints", "call_2", top_k=2), search(QUESTION, "call_3", top_k=4)),
        ChatReply.text("Joints move links [2]."),
    )
    agent = build_agentic(store, consistent_limit=3)
    events = await collect(agent.run(request(QUESTION, max_results=5)))

    check_events(events)
    # "joints" for 2 after 1: more than was found; the question for 4: past the promise (3).
    assert sorted((c.query, c.limit) for c in store.calls) == [
        (QUESTION, 4),
        (QUESTION, 5),
        ("joints", 1),
        ("joints", 2),
    ]
