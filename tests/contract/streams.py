"""The documented shape of an AskStream run, as a checker that any sequence of events can be
held against (the server tests may use it on what a real server streams).

From the AskStreamResponse documentation in agent.proto:

- ``sequence`` starts at 1 and increases by 1;
- events come in this order: ``run_started``; then, per retrieval, ``tool_call_started``
  with status PENDING, ``tool_call_started`` with status EXECUTING, ``sources_found`` and
  ``tool_call_completed`` with status COMPLETED, ERROR or TIMEOUT; then ``answer_delta``
  events; then ``completed``, always the last event of a stream that ends with status OK;
- ``heartbeat`` events may come at any point (here: after ``run_started``);
- every ``answer_delta.text`` is non-empty, and their concatenation is exactly
  ``completed.answer``.

Every retrieval is a ``qdrant_retrieval`` tool call, including those a strategy runs itself,
so every ``sources_found`` names a tool call that is running.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragagent.v1 import agent_pb2, types_pb2

_ENDED = {
    types_pb2.TOOL_CALL_STATUS_COMPLETED,
    types_pb2.TOOL_CALL_STATUS_ERROR,
    types_pb2.TOOL_CALL_STATUS_TIMEOUT,
}

# Every case of the `event` oneof, each one documented in the AskStreamResponse comment.
DOCUMENTED_EVENTS = frozenset(
    {
        "run_started",
        "tool_call_started",
        "sources_found",
        "tool_call_completed",
        "answer_delta",
        "citation",
        "heartbeat",
        "completed",
    }
)

# Phases of a run; an event may only move the run forward.
_PHASE = {
    "run_started": 0,
    "tool_call_started": 1,
    "sources_found": 1,
    "tool_call_completed": 1,
    # A model may write text before asking for a tool in the same turn; that text streams as
    # it comes, so deltas and later tool calls interleave (never while a call runs).
    "answer_delta": 1,
    "citation": 1,
    "completed": 2,
}


def answer_text(events: Sequence[agent_pb2.AskStreamResponse]) -> str:
    """The answer as a client assembles it: the answer_delta texts, in order."""
    return "".join(e.answer_delta.text for e in events if e.WhichOneof("event") == "answer_delta")


def check_stream(events: Sequence[agent_pb2.AskStreamResponse]) -> None:
    """Raises AssertionError naming the first rule of the stream contract that is broken."""
    assert events, "the stream is empty"
    for expected, event in enumerate(events, start=1):
        assert event.sequence == expected, (
            f"event {expected} has sequence {event.sequence}: sequences start at 1 and "
            "increase by 1"
        )
    kinds = [event.WhichOneof("event") for event in events]
    assert None not in kinds, f"event {kinds.index(None) + 1} carries no event"
    undocumented = set(kinds) - DOCUMENTED_EVENTS
    assert not undocumented, f"undocumented events: {sorted(undocumented)}"
    assert kinds[0] == "run_started", f"the first event is {kinds[0]}, not run_started"
    assert kinds[-1] == "completed", f"the last event is {kinds[-1]}, not completed"
    assert kinds.count("run_started") == 1, "run_started comes more than once"
    assert kinds.count("completed") == 1, "completed comes more than once"

    phase = 0
    pending: set[str] = set()
    asked: set[str] = set()
    open_calls: set[str] = set()
    for position, (kind, event) in enumerate(zip(kinds, events, strict=True), start=1):
        if kind == "heartbeat":
            continue
        assert _PHASE[kind] >= phase, f"event {position} ({kind}) comes after a later phase"
        phase = _PHASE[kind]
        if kind == "tool_call_started":
            call = event.tool_call_started
            call_id = call.id
            assert call_id, f"event {position}: tool_call_started has no id"
            assert call_id not in open_calls, f"event {position}: tool call {call_id} restarted"
            if call.status == types_pb2.TOOL_CALL_STATUS_PENDING:
                assert call_id not in asked, f"event {position}: tool call {call_id} asked twice"
                assert not call.HasField("started_at"), f"event {position}: pending, started"
                asked.add(call_id)
                pending.add(call_id)
                continue
            assert call.status == types_pb2.TOOL_CALL_STATUS_EXECUTING, (
                f"event {position}: tool_call_started with status {call.status}"
            )
            assert call_id in pending, f"event {position}: {call_id} executes, never PENDING"
            pending.remove(call_id)
            open_calls.add(call_id)
        elif kind == "sources_found":
            call_id = event.sources_found.tool_call_id
            assert call_id in open_calls, (
                f"event {position}: sources_found for tool call {call_id!r}, which is not running"
            )
        elif kind == "tool_call_completed":
            call_id = event.tool_call_completed.id
            assert call_id in open_calls, (
                f"event {position}: tool_call_completed for {call_id!r}, which never started"
            )
            assert event.tool_call_completed.status in _ENDED, (
                f"event {position}: tool_call_completed with status "
                f"{event.tool_call_completed.status}"
            )
            open_calls.remove(call_id)
        elif kind == "answer_delta":
            assert event.answer_delta.text, f"event {position}: answer_delta with empty text"
            assert not open_calls, f"event {position}: answer text while {open_calls} still run"

    assert not pending, f"calls never started: {pending}"
    assert not open_calls, f"calls never ended: {open_calls}"
    completed = events[-1].completed
    streamed = [e.citation for e in events if e.WhichOneof("event") == "citation"]
    assert streamed == list(completed.citations), "citation events differ from completed.citations"
    assert answer_text(events) == completed.answer, (
        "the answer_delta texts do not add up to completed.answer:\n"
        f"  deltas:    {answer_text(events)!r}\n  completed: {completed.answer!r}"
    )
