"""AskStream's documented event contract, checked on messages.

This is a message-level specification: it builds an AskStreamResponse sequence by hand and
holds it against :func:`tests.contract.streams.check_stream`, which encodes what the
AskStreamResponse documentation promises (sequence numbers, event order, answer_delta
texts adding up to ``completed.answer``). It proves the checker and the documentation
agree, not that the server keeps the promise; that is tested against a running server
elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf import struct_pb2
from ragagent.v1 import agent_pb2, types_pb2

from tests.contract.streams import DOCUMENTED_EVENTS, answer_text, check_stream

AGENT_PROTO = Path(__file__).resolve().parents[2] / "protos" / "ragagent" / "v1" / "agent.proto"
ANSWER = "Nodes talk over topics [1]. Überall: é, 🤖 and 語 survive the split [2]."
DELTAS = [
    "Nodes talk",
    " over topics [1]",
    ". Überall: é, 🤖",
    " and 語",
    " survive the split [2].",
]

Event = agent_pb2.AskStreamResponse


def source(n: int) -> types_pb2.SourceInfo:
    return types_pb2.SourceInfo(
        chunk_id=f"chunk-{n}", document_id=f"module-01/page-0{n}.md", score=0.8, citation=n
    )


def tool_call(status: types_pb2.ToolCallStatus.ValueType) -> types_pb2.ToolCallInfo:
    arguments = struct_pb2.Struct()
    arguments.update({"query": "ROS 2 topics"})
    return types_pb2.ToolCallInfo(
        id="call-1", name="qdrant_retrieval", arguments=arguments, status=status
    )


def numbered(*events: Event) -> list[Event]:
    """Gives the events their sequence numbers, 1, 2, 3, ..."""
    for sequence, event in enumerate(events, start=1):
        event.sequence = sequence
    return list(events)


def a_run() -> list[Event]:
    """A run of the agentic strategy: one tool call (asked for, then executing), a streamed
    answer, the final response."""
    return numbered(
        Event(run_started=agent_pb2.RunStarted(request_id="r-1", session_id="s-1")),
        Event(tool_call_started=tool_call(types_pb2.TOOL_CALL_STATUS_PENDING)),
        Event(tool_call_started=tool_call(types_pb2.TOOL_CALL_STATUS_EXECUTING)),
        Event(sources_found=agent_pb2.SourcesFound(
            tool_call_id="call-1", sources=[source(1), source(2)],
        )),
        Event(tool_call_completed=tool_call(types_pb2.TOOL_CALL_STATUS_COMPLETED)),
        Event(heartbeat=agent_pb2.Heartbeat(phase="model")),
        *(Event(answer_delta=agent_pb2.AnswerDelta(text=text)) for text in DELTAS),
        Event(completed=agent_pb2.AgentResponse(
            request_id="r-1", session_id="s-1", answer=ANSWER, sources=[source(1), source(2)],
            status=agent_pb2.RESPONSE_STATUS_SUCCESS, finish_reason="stop",
        )),
    )  # fmt: skip


def test_a_complete_run_keeps_the_contract() -> None:
    check_stream(a_run())


def test_the_answer_deltas_add_up_to_the_completed_answer() -> None:
    events = a_run()
    assert answer_text(events) == events[-1].completed.answer == ANSWER


def test_sequence_numbers_start_at_one_and_are_consecutive() -> None:
    assert [event.sequence for event in a_run()] == list(range(1, len(a_run()) + 1))


def test_sources_found_outside_a_tool_call_is_rejected() -> None:
    """Strategies report their own searches as qdrant_retrieval tool calls too."""
    with pytest.raises(AssertionError, match="not running"):
        check_stream(
            numbered(
                Event(run_started=agent_pb2.RunStarted(request_id="r-1")),
                Event(sources_found=agent_pb2.SourcesFound(sources=[source(1)])),
                Event(answer_delta=agent_pb2.AnswerDelta(text="Quoted [1].")),
                Event(completed=agent_pb2.AgentResponse(answer="Quoted [1].")),
            )
        )


def test_a_run_without_answer_text_has_an_empty_answer() -> None:
    """A NO_ANSWER run may stream no delta at all; then the answer is empty too."""
    check_stream(
        numbered(
            Event(run_started=agent_pb2.RunStarted()),
            Event(completed=agent_pb2.AgentResponse(status=agent_pb2.RESPONSE_STATUS_NO_ANSWER)),
        )
    )


def _drop(*kinds: str) -> Callable[[list[Event]], list[Event]]:
    def change(events: list[Event]) -> list[Event]:
        return numbered(*(e for e in events if e.WhichOneof("event") not in kinds))

    return change


def _edit_delta(events: list[Event]) -> list[Event]:
    events[7].answer_delta.text = "Nodes talk!"
    return events


def _empty_delta(events: list[Event]) -> list[Event]:
    events[7].answer_delta.text = ""
    events[8].answer_delta.text = "Nodes talk" + events[8].answer_delta.text
    return events


def _gap(events: list[Event]) -> list[Event]:
    events[3].sequence += 1
    return events


def _from_zero(events: list[Event]) -> list[Event]:
    for event in events:
        event.sequence -= 1
    return events


def _swap(first: int, second: int) -> Callable[[list[Event]], list[Event]]:
    def change(events: list[Event]) -> list[Event]:
        events[first], events[second] = events[second], events[first]
        return numbered(*events)

    return change


def _lost_delta(events: list[Event]) -> list[Event]:
    return numbered(*events[:8], *events[9:])


def _drop_pending(events: list[Event]) -> list[Event]:
    return numbered(events[0], *events[2:])


def _unfinished_end(events: list[Event]) -> list[Event]:
    events[4].tool_call_completed.status = types_pb2.TOOL_CALL_STATUS_EXECUTING
    return events


def _retrieval_after_answer(events: list[Event]) -> list[Event]:
    """run_started, a first delta, then the tool call, then the other deltas."""
    return numbered(events[0], events[6], *events[1:6], *events[7:])


def test_text_written_before_a_later_tool_call_streams_first() -> None:
    """A model may write text, then ask for a tool in the same turn: the text already went."""
    check_stream(_retrieval_after_answer(a_run()))


BROKEN = [
    pytest.param(_edit_delta, "do not add up to completed.answer", id="a delta differs"),
    pytest.param(_lost_delta, "do not add up to completed.answer", id="a delta is lost"),
    pytest.param(_empty_delta, "answer_delta with empty text", id="an empty delta"),
    pytest.param(_gap, "sequences start at 1 and increase by 1", id="a sequence gap"),
    pytest.param(_from_zero, "sequences start at 1", id="sequence from 0"),
    pytest.param(_drop("run_started"), "not run_started", id="no run_started"),
    pytest.param(_drop("completed"), "not completed", id="no completed"),
    pytest.param(_drop("tool_call_started"), "not running", id="sources of no tool call"),
    pytest.param(
        _drop("tool_call_started", "sources_found"), "never started", id="completion without start"
    ),
    pytest.param(_drop("tool_call_completed"), "still run", id="answer during a tool call"),
    pytest.param(_swap(6, 4), "still run", id="answer before the tool call ends"),
    pytest.param(_drop_pending, "never PENDING", id="executing without pending"),
    pytest.param(_unfinished_end, "tool_call_completed with status", id="ended still executing"),
    pytest.param(_swap(0, 1), "not run_started", id="tool call before run_started"),
    pytest.param(_swap(-1, -2), "not completed", id="delta after completed"),
]


@pytest.mark.parametrize(("break_it", "complaint"), BROKEN)
def test_a_stream_that_breaks_the_contract_is_caught(
    break_it: Callable[[list[Event]], list[Event]], complaint: str
) -> None:
    with pytest.raises(AssertionError, match=re.escape(complaint)):
        check_stream(break_it(a_run()))


def test_every_event_case_is_a_documented_one() -> None:
    """A new event in the oneof fails here until the checker and the comment describe it."""
    oneof = agent_pb2.AskStreamResponse.DESCRIPTOR.oneofs_by_name["event"]
    assert {field.name for field in oneof.fields} == DOCUMENTED_EVENTS


def _message_comment(proto: str, message: str) -> str:
    """The // comment block right above ``message <name> {``."""
    lines = proto.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"message {message} {{"))
    block: list[str] = []
    for line in reversed(lines[:start]):
        if not line.startswith("//"):
            break
        block.insert(0, line.removeprefix("//").strip())
    return " ".join(block)


def test_the_message_comment_names_every_event() -> None:
    comment = _message_comment(AGENT_PROTO.read_text(), "AskStreamResponse")
    assert "Concatenating the `answer_delta.text`" in comment
    missing = sorted(event for event in DOCUMENTED_EVENTS if f"`{event}`" not in comment)
    assert not missing, f"the AskStreamResponse comment does not describe: {missing}"
