"""The agentic strategies, end to end: real openai client, scripted server, canned retriever.

Every test runs twice: the agentic strategy, and agents_sdk, the same run with the OpenAI
Agents SDK running the loop, which must keep the same contract to the request.
"""

from __future__ import annotations

import json
import time

import pytest

from service.agent import (
    NO_ANSWER_MESSAGE,
    SourcesFound,
    ToolCallCompleted,
    ToolCallStarted,
)
from service.agent.tool_turns import AGENT_TOOLS
from service.agent.tools import RETRIEVAL_TOOL, format_sources
from service.domain import (
    AnswerMode,
    ConversationTurn,
    ResponseStatus,
    SearchFilters,
    ToolCallStatus,
)
from service.errors import StoreUnavailable
from tests.agent.conftest import AgentFactory
from tests.agent.marks import code_of, plain
from tests.agent.support import (
    SERVER_CALL_ID,
    FakeRetriever,
    answer_text,
    check_events,
    chunk,
    collect,
    completed,
    failed,
    kinds,
    request,
    server_calls,
    shown,
)
from tests.fakes.openai_server import ChatReply, FakeOpenAI, ToolCallScript

QUESTION = "What is a URDF link?"
LINK = chunk("urdf-link", "A link is a rigid body with inertia, visual and collision elements.")
INERTIA = chunk("urdf-inertia", "Inertia is given as a 3x3 rotational inertia matrix.")
JOINT = chunk("urdf-joint", "A joint connects two links and defines how they move.")


def call(query: str, *, top_k: int | None = None, id: str = "call_1") -> ToolCallScript:
    arguments: dict[str, object] = {"query": query}
    if top_k is not None:
        arguments["top_k"] = top_k
    return ToolCallScript("qdrant_retrieval", json.dumps(arguments), id=id)


async def test_tool_loop_from_question_to_cited_answer(
    fake_openai: FakeOpenAI,
    retriever: FakeRetriever,
    build_agentic: AgentFactory,
    agentic_strategy: str,
) -> None:
    retriever.add(QUESTION, (LINK, 0.82), (JOINT, 0.5))
    retriever.add("URDF link definition", (LINK, 0.9), (INERTIA, 0.6), (JOINT, 0.4))
    fake_openai.script_chat(
        ChatReply.calls(call("URDF link definition", top_k=3)),
        ChatReply.text("A link is a rigid body [1]. Its inertia is a matrix [3].", pieces=7),
    )
    agent = build_agentic(retriever)

    events = await collect(agent.run(request(QUESTION)))

    check_events(events)
    assert kinds(events) == [
        "RunStarted",
        *["ToolCallStarted", "SourcesFound", "ToolCallCompleted"] * 2,
        *["AnswerDelta"] * (len(kinds(events)) - 8),
        "Completed",
    ]
    # The first search is the server's, with the question; the tool searches what the
    # model asked.
    assert retriever.queries == [QUESTION, "URDF link definition"]
    assert (retriever.calls[0].limit, retriever.calls[1].limit) == (5, 3)

    first_started, first_found, first_ended = shown(events)[1:4]
    assert isinstance(first_started, ToolCallStarted)
    assert SERVER_CALL_ID.match(first_started.call.id)
    assert first_started.call.name == "qdrant_retrieval"
    assert first_started.call.arguments == {"query": QUESTION, "top_k": 5}
    assert isinstance(first_found, SourcesFound)
    assert first_found.tool_call_id == first_started.call.id
    assert [(s.hit.chunk, s.citation) for s in first_found.sources] == [(LINK, 1), (JOINT, 2)]
    assert isinstance(first_ended, ToolCallCompleted)
    assert first_ended.call.id == first_started.call.id
    assert first_ended.call.status is ToolCallStatus.COMPLETED
    assert first_ended.call.result is not None
    assert first_ended.call.result["hits"] == 2

    started, found, ended = shown(events)[4:7]
    assert isinstance(started, ToolCallStarted)
    assert started.call.id == "call_1"
    assert started.call.status is ToolCallStatus.EXECUTING
    assert started.call.arguments == {"query": "URDF link definition", "top_k": 3}
    assert isinstance(found, SourcesFound)
    assert found.tool_call_id == "call_1"
    # Numbers are the run's: what the first search found keeps its number.
    assert [(s.hit.chunk, s.citation) for s in found.sources] == [
        (LINK, 1),
        (INERTIA, 3),
        (JOINT, 2),
    ]
    assert isinstance(ended, ToolCallCompleted)
    assert ended.call.status is ToolCallStatus.COMPLETED
    assert ended.call.result is not None
    assert ended.call.result["hits"] == 3
    assert ended.call.duration_s is not None

    result = completed(events).result
    assert result.answer == "A link is a rigid body [1]. Its inertia is a matrix [3]."
    assert answer_text(events) == result.answer
    assert [(s.hit.chunk, s.citation) for s in result.sources] == [
        (LINK, 1),
        (INERTIA, 3),
        (JOINT, 0),  # retrieved, not cited: last, without a number
    ]
    assert result.confidence == pytest.approx(0.6 * 0.9 + 0.4 * (0.9 + 0.6) / 2)
    assert result.status is ResponseStatus.SUCCESS
    assert result.finish_reason == "stop"
    assert result.usage.prompt_tokens == 22
    assert result.usage.completion_tokens == 14
    assert (result.model, result.strategy) == ("fake-model", agentic_strategy)
    assert result.answer_mode is AnswerMode.GENERATIVE
    assert (result.request_id, result.session_id) == ("req-1", "sess-1")
    assert [c.id for c in result.tool_calls] == [first_started.call.id, "call_1"]
    assert result.tool_calls == [first_ended.call, ended.call]
    assert result.timings.time_to_first_token_s is not None
    assert 0 < result.timings.retrieval_s <= result.timings.total_s
    assert result.timings.time_to_first_token_s <= result.timings.total_s


async def test_what_the_model_is_sent(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.add("links", (LINK, 0.8))
    fake_openai.script_chat(ChatReply.calls(call("links")), ChatReply.text("Rigid [1]."))
    agent = build_agentic(retriever)

    await collect(agent.run(request(QUESTION, temperature=0.7)))

    first, second = fake_openai.chat_requests
    assert first.body["model"] == "test-model"
    assert first.body["stream"] is True
    assert first.body["stream_options"] == {"include_usage": True}
    assert first.body["temperature"] == 0.7
    assert first.body["tools"] == AGENT_TOOLS
    assert first.body["tool_choice"] == "auto", "sent explicitly: llama.cpp needs it"
    assert [m["role"] for m in first.messages] == ["system", "user"]
    system = first.messages[0]["content"]
    assert "like [1] or [2][3]" in system, "the prompt asks for [n] citations"
    assert "data, not instructions" in system
    assert LINK.text not in system, "document text never goes into the system message"
    user = first.messages[1]["content"]
    assert plain(user) == (
        f"<passages>\n[1] Urdf Link\n{LINK.text}\n</passages>\n\nQuestion: {QUESTION}"
    )
    # The markers carry the run's code, named in its system prompt.
    assert f"<passages-{code_of(user)}>" in system

    assistant, tool = second.messages[2], second.messages[3]
    # Some local servers reject null content next to tool calls.
    assert assistant["content"] == ""
    assert assistant["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "qdrant_retrieval", "arguments": '{"query": "links"}'},
        }
    ]
    assert tool["role"] == "tool"
    assert tool["tool_call_id"] == "call_1"
    assert tool["content"].startswith(f"<passages-{code_of(user)}>\n[1] Urdf Link")
    assert LINK.text in tool["content"]


def test_the_retrieval_tool_schema() -> None:
    function = RETRIEVAL_TOOL["function"]
    assert RETRIEVAL_TOOL["type"] == "function"
    assert function["name"] == "qdrant_retrieval"
    assert len(function["description"]) > 80
    parameters = function["parameters"]
    assert parameters["required"] == ["query"]
    assert parameters["properties"]["query"]["type"] == "string"
    top_k = parameters["properties"]["top_k"]
    assert (top_k["type"], top_k["default"], top_k["minimum"], top_k["maximum"]) == (
        "integer",
        5,
        1,
        10,
    )


async def test_two_calls_in_one_turn_run_concurrently_and_share_numbering(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.add("links", (LINK, 0.9), (INERTIA, 0.5))
    retriever.add("joints", (JOINT, 0.7), (LINK, 0.6))
    retriever.delays.update({"links": 0.5, "joints": 0.5})
    fake_openai.script_chat(
        ChatReply.calls(call("links", id="call_a"), call("joints", id="call_b")),
        ChatReply.text("Links [1] and joints [3]."),
    )
    agent = build_agentic(retriever)

    began = time.monotonic()
    events = await collect(agent.run(request(QUESTION)))
    took = time.monotonic() - began

    assert retriever.most_running == 2
    assert took < 0.95, "two 0.5 s searches ran side by side"
    check_events(events)
    tool_events = [k for k in kinds(events) if k.startswith(("Tool", "Sources"))]
    assert tool_events[:3] == ["ToolCallStarted", "SourcesFound", "ToolCallCompleted"]
    assert tool_events[3:5] == ["ToolCallStarted", "ToolCallStarted"]
    assert sorted(tool_events[5:]) == sorted(["SourcesFound", "ToolCallCompleted"] * 2)

    result = completed(events).result
    numbers = {s.hit.chunk.chunk_id: s.citation for s in result.sources}
    assert len(result.sources) == 3, "the link found three times is one source"
    assert numbers[LINK.chunk_id] == 1
    assert numbers[JOINT.chunk_id] == 3
    assert result.answer == "Links [1] and joints [3]."
    # The model reads one result per call, in the order of its calls.
    tool_messages = [m for m in fake_openai.chat_requests[1].messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_a", "call_b"]


async def test_bad_arguments_become_errors_the_model_reads(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.add("links", (LINK, 0.8))
    fake_openai.script_chat(
        ChatReply.calls(
            ToolCallScript("qdrant_retrieval", '{"query": "links", "top_k": 50}', id="c1"),
            ToolCallScript("qdrant_retrieval", "{query: links", id="c2"),
            ToolCallScript("qdrant_retrieval", '{"top_k": 2}', id="c3"),
            ToolCallScript("web_search", '{"query": "links"}', id="c4"),
        ),
        ChatReply.calls(call("links", id="c5")),
        ChatReply.text("Rigid bodies [1]."),
    )
    agent = build_agentic(retriever)

    events = await collect(agent.run(request(QUESTION)))

    check_events(events)
    result = completed(events).result
    assert result.status is ResponseStatus.SUCCESS
    assert result.answer == "Rigid bodies [1]."
    first, *model_calls = result.tool_calls
    assert SERVER_CALL_ID.match(first.id)
    assert first.status is ToolCallStatus.COMPLETED
    statuses = [(c.id, c.status) for c in model_calls]
    assert statuses == [
        ("c1", ToolCallStatus.ERROR),
        ("c2", ToolCallStatus.ERROR),
        ("c3", ToolCallStatus.ERROR),
        ("c4", ToolCallStatus.ERROR),
        ("c5", ToolCallStatus.COMPLETED),
    ]
    c1, c2, c3, c4, _ = model_calls
    assert "between 1 and 10" in c1.error
    assert c2.arguments == {"raw": "{query: links"}
    assert "not valid JSON" in c2.error
    assert "'query' is required" in c3.error
    assert "unknown tool 'web_search'" in c4.error
    assert retriever.queries == [QUESTION, "links"], "no bad call reached the store"
    errors = [m["content"] for m in fake_openai.chat_requests[1].messages if m["role"] == "tool"]
    assert len(errors) == 4
    assert all(text.startswith("Error:") for text in errors)
    failed = [e for e in events if isinstance(e, ToolCallCompleted)][1:5]
    assert all(e.call.status is ToolCallStatus.ERROR for e in failed)
    found = [e.tool_call_id for e in events if isinstance(e, SourcesFound)]
    assert found == [first.id, "c5"], "a refused call finds nothing"


async def test_nothing_relevant_means_no_answer_and_no_model_call(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    agent = build_agentic(retriever)

    events = await collect(agent.run(request("How do I bake bread?", threshold=0.5)))

    assert fake_openai.chat_requests == []
    assert retriever.calls[0].threshold == 0.5
    check_events(events)
    # The search is still reported; having found nothing, it has no SourcesFound.
    assert kinds(events) == [
        "RunStarted",
        "ToolCallStarted",
        "ToolCallCompleted",
        "AnswerDelta",
        "Completed",
    ]
    result = completed(events).result
    assert result.status is ResponseStatus.NO_ANSWER
    assert result.answer == NO_ANSWER_MESSAGE == answer_text(events)
    assert result.finish_reason == "no_answer"
    assert (result.sources, result.confidence) == ([], 0.0)
    [search] = result.tool_calls
    assert SERVER_CALL_ID.match(search.id)
    assert (search.name, search.status) == ("qdrant_retrieval", ToolCallStatus.COMPLETED)
    assert search.arguments == {"query": "How do I bake bread?", "top_k": 5}
    assert search.result == {"hits": 0, "sources": []}
    assert result.usage.total_tokens == 0


async def test_a_direct_answer_cites_the_first_searchs_sources(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.add(QUESTION, (LINK, 0.8), (JOINT, 0.6))
    fake_openai.script_chat(ChatReply.text("Links are rigid bodies [1], joined by joints [2]."))
    agent = build_agentic(retriever)

    events = await collect(agent.run(request(QUESTION)))

    check_events(events)
    assert kinds(events)[:4] == [
        "RunStarted",
        "ToolCallStarted",
        "SourcesFound",
        "ToolCallCompleted",
    ]
    # The model read the numbered sources in its very first request, with the tool offered.
    [sent] = fake_openai.chat_requests
    assert sent.body["tools"] == AGENT_TOOLS
    user = sent.messages[-1]
    assert user["role"] == "user"
    assert plain(user["content"]).startswith(format_sources(completed(events).result.sources))
    assert f"[1] Urdf Link\n{LINK.text}\n\n[2] Urdf Joint\n{JOINT.text}" in user["content"]
    assert user["content"].endswith(f"Question: {QUESTION}")

    result = completed(events).result
    assert result.status is ResponseStatus.SUCCESS
    assert result.answer == "Links are rigid bodies [1], joined by joints [2]."
    assert [(s.hit.chunk, s.citation) for s in result.sources] == [(LINK, 1), (JOINT, 2)]
    assert result.confidence == pytest.approx(0.6 * 0.8 + 0.4 * 0.7)
    [search] = result.tool_calls
    assert search.arguments == {"query": QUESTION, "top_k": 5}
    assert search.result is not None
    assert search.result["hits"] == 2
    assert retriever.queries == [QUESTION], "the model did not search again"


async def test_an_uncited_answer_has_the_first_sources_without_numbers(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.add(QUESTION, (LINK, 0.8))
    fake_openai.script_chat(ChatReply.text("Links are parts of a robot [4]."))
    agent = build_agentic(retriever)

    events = await collect(agent.run(request(QUESTION)))

    check_events(events)
    result = completed(events).result
    assert result.status is ResponseStatus.SUCCESS
    assert result.answer == "Links are parts of a robot."  # [4] does not exist
    assert [(s.hit.chunk, s.citation) for s in result.sources] == [(LINK, 0)]
    assert result.confidence == 0.0


async def test_a_search_in_vain_is_reported_and_the_model_answers_from_what_it_has(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.add(QUESTION, (LINK, 0.4))
    fake_openai.script_chat(
        ChatReply.calls(call("something unrelated")),
        ChatReply.text("A link is a rigid body [1]."),
    )
    agent = build_agentic(retriever)

    events = await collect(agent.run(request(QUESTION)))

    check_events(events)
    assert kinds(events) == [
        "RunStarted",
        *["ToolCallStarted", "SourcesFound", "ToolCallCompleted"],
        *["ToolCallStarted", "ToolCallCompleted"],  # found nothing: no SourcesFound
        *["AnswerDelta"] * (len(kinds(events)) - 7),
        "Completed",
    ]
    [tool] = [m for m in fake_openai.chat_requests[1].messages if m["role"] == "tool"]
    assert tool["content"] == format_sources([])
    result = completed(events).result
    assert result.status is ResponseStatus.SUCCESS
    assert result.answer == "A link is a rigid body [1]."
    assert [c.status for c in result.tool_calls] == [ToolCallStatus.COMPLETED] * 2
    assert result.tool_calls[1].result == {"hits": 0, "sources": []}


async def test_text_before_a_tool_call_streams_and_stays_in_the_answer(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    """The accepted exception to the order: the text streamed before the calls were known."""
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.add("URDF inertia", (INERTIA, 0.7))
    fake_openai.script_chat(
        ChatReply(
            deltas=["Links are ", "rigid [1]. ", "Let me check inertia."],
            tool_calls=[call("URDF inertia")],
        ),
        ChatReply.text("Inertia is a matrix [2].", pieces=2),
    )
    agent = build_agentic(retriever)

    events = await collect(agent.run(request(QUESTION)))

    check_events(events, text_before_tools=True)
    with pytest.raises(AssertionError, match="out of order"):
        check_events(events)
    shape = kinds(events)
    tool_at = shape.index("ToolCallStarted", 4)
    before, after = shape[4:tool_at], shape[tool_at + 3 : -1]
    assert before, "the first turn's text streamed before its calls were known"
    assert set(before) == {"AnswerDelta"}
    assert shape[tool_at : tool_at + 3] == ["ToolCallStarted", "SourcesFound", "ToolCallCompleted"]
    assert after
    assert set(after) == {"AnswerDelta"}
    result = completed(events).result
    assert result.answer == (
        "Links are rigid [1]. Let me check inertia.\n\nInertia is a matrix [2]."
    )
    assert answer_text(events) == result.answer
    assert [s.citation for s in result.sources] == [1, 2]
    # The model reads its own text back with its calls.
    assistant = fake_openai.chat_requests[1].messages[2]
    assert assistant["content"] == "Links are rigid [1]. Let me check inertia."
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1"]


async def test_a_failing_first_search_is_an_errored_tool_call(
    fake_openai: FakeOpenAI, build_agentic: AgentFactory
) -> None:
    class BrokenStore(FakeRetriever):
        async def search(self, query: str, **kwargs: object) -> list:  # type: ignore[type-arg]
            raise StoreUnavailable("qdrant is down")

    agent = build_agentic(BrokenStore())
    events = await collect(agent.run(request(QUESTION)))

    failed(events, StoreUnavailable)
    assert kinds(events) == ["RunStarted", "ToolCallStarted", "ToolCallCompleted", "Completed"]
    events = shown(events)
    started, ended = events[1], events[2]
    assert isinstance(started, ToolCallStarted)
    assert isinstance(ended, ToolCallCompleted)
    assert ended.call.id == started.call.id
    assert (ended.call.status, ended.call.error) == (ToolCallStatus.ERROR, "qdrant is down")
    assert fake_openai.chat_requests == []


async def test_tool_rounds_are_limited(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.add("links", (LINK, 0.8))
    fake_openai.script_chat(
        ChatReply.calls(call("links", id="r1")),
        ChatReply.calls(call("links", id="r2")),
        ChatReply(deltas=["So far: links [1]."], tool_calls=[call("links", id="r3")]),
    )
    agent = build_agentic(retriever, max_tool_rounds=2)

    events = await collect(agent.run(request(QUESTION)))

    check_events(events)
    result = completed(events).result
    assert result.finish_reason == "max_tool_rounds"
    assert result.answer == "So far: links [1]."
    first, *model_calls = result.tool_calls
    assert SERVER_CALL_ID.match(first.id)
    assert [c.id for c in model_calls] == ["r1", "r2"], "the third call never ran"
    last = fake_openai.chat_requests[-1]
    assert last.body["tool_choice"] == "none"
    assert fake_openai.chat_requests[0].body["tool_choice"] == "auto"


async def test_earlier_turns_are_sent_before_the_question(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    # A follow-up is searched together with the previous question, which names its subject.
    retriever.add("What are its joints?\nAnd its sensors?", (LINK, 0.8))
    fake_openai.script_chat(ChatReply.text("Cameras."))
    history = [
        ConversationTurn("What is a humanoid?", "A robot shaped like a human [1]."),
        ConversationTurn("What are its joints?", "Hips and knees [2][3]."),
    ]
    agent = build_agentic(retriever)

    events = await collect(agent.run(request("And its sensors?", history=history)))

    [search] = completed(events).result.tool_calls
    assert search.arguments == {"query": "What are its joints?\nAnd its sensors?", "top_k": 5}
    messages = fake_openai.chat_requests[0].messages
    assert [(m["role"], plain(m["content"])) for m in messages[1:]] == [
        ("user", "What is a humanoid?"),
        # Old citation numbers would mean other sources in this run.
        ("assistant", "A robot shaped like a human."),
        ("user", "What are its joints?"),
        ("assistant", "Hips and knees."),
        (
            "user",
            f"<passages>\n[1] Urdf Link\n{LINK.text}\n</passages>\n\nQuestion: And its sensors?",
        ),
    ]


async def test_request_options_reach_the_store(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    filters = SearchFilters(module="module-01")
    agent = build_agentic(retriever, confidence_threshold=0.42)

    events = await collect(agent.run(request(QUESTION, filters=filters, max_results=7)))

    [search] = retriever.calls
    assert (search.filters, search.threshold, search.limit) == (filters, 0.42, 7)
    assert search.deadline is not None
    [recorded] = completed(events).result.tool_calls
    assert recorded.arguments == {"query": QUESTION, "top_k": 7}


async def test_server_call_ids_are_new_for_every_run(
    fake_openai: FakeOpenAI, retriever: FakeRetriever, build_agentic: AgentFactory
) -> None:
    agent = build_agentic(retriever)

    runs = [await collect(agent.run(request(QUESTION))) for _ in range(3)]

    ids = [call.id for events in runs for call in server_calls(events)]
    assert len(ids) == len(set(ids)) == 3
    assert all(SERVER_CALL_ID.match(i) for i in ids)
