"""Enum values the protos say are "never sent by the server": every domain value the server
converts has a proto value of its own, never the zero (UNSPECIFIED) one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from service.api import convert
from service.api import sessions as session_api
from service.domain import AnswerMode, ResponseStatus, ToolCallRecord, ToolCallStatus
from service.sessions.records import RunStatus, SessionStatus


@pytest.mark.parametrize(
    ("table", "domain"),
    [
        (convert._RESPONSE_STATUS, ResponseStatus),
        (convert._TOOL_STATUS, ToolCallStatus),
        (convert._ANSWER_MODE, AnswerMode),
        (session_api._RUN_STATUS, RunStatus),
        (session_api._SESSION_STATUS, SessionStatus),
    ],
    ids=["ResponseStatus", "ToolCallStatus", "AnswerMode", "RunStatus", "SessionStatus"],
)
def test_every_domain_value_has_a_wire_value_that_is_not_unspecified(
    table: dict[object, int], domain: type
) -> None:
    assert set(table) == set(domain), "a domain value the server cannot send"
    assert 0 not in table.values()
    assert len(set(table.values())) == len(table), "two domain values share a wire value"


@pytest.mark.parametrize(
    ("call_id", "origin", "expected"),
    [
        ("srv_0123", "service", "TOOL_CALL_ORIGIN_SERVICE"),
        ("call_1", "model", "TOOL_CALL_ORIGIN_MODEL"),
        ("srv_0123", "", "TOOL_CALL_ORIGIN_SERVICE"),  # read back from an older record
        ("call_1", "", "TOOL_CALL_ORIGIN_MODEL"),
    ],
)
def test_a_tool_calls_origin_is_always_sent(call_id: str, origin: str, expected: str) -> None:
    call = ToolCallRecord(
        id=call_id,
        name="qdrant_retrieval",
        arguments={"query": "q"},
        status=ToolCallStatus.COMPLETED,
        started_at=datetime.now(UTC),
        origin=origin,
    )
    message = convert.tool_call_to_proto(call)
    assert (
        message.DESCRIPTOR.fields_by_name["origin"].enum_type.values_by_number[message.origin].name
        == expected
    )


def test_a_pending_call_has_no_start_time_and_no_duration() -> None:
    """ToolCallInfo.started_at: unset while PENDING; duration: unset until it ends."""
    message = convert.tool_call_to_proto(
        ToolCallRecord(id="call_1", name="qdrant_retrieval", arguments={"query": "q"})
    )
    assert message.status == convert.types_pb2.TOOL_CALL_STATUS_PENDING
    assert not message.HasField("started_at")
    assert not message.HasField("duration")
    assert not message.HasField("result")
