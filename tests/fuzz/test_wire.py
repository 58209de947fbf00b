"""Property: bytes that are not a request message get INVALID_ARGUMENT, never a crash.

Raw garbage, truncated valid messages, invalid UTF-8 in string fields and parser bombs go
to every RPC through a generic channel (for IngestDocuments, among generated messages of a
client stream). What the generated class cannot parse must be answered with
INVALID_ARGUMENT; what it can parse (garbage is often a valid message of unknown fields)
with one of the RPC's documented statuses. The server must survive all of it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.calls import check, invoke
from tests.fuzz.conftest import FuzzTarget
from tests.fuzz.strategies import Rpc, all_rpcs, messages

RPCS = all_rpcs()
FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
# Not UTF-8: a lone continuation byte, an overlong NUL, an encoded surrogate, a code point
# past U+10FFFF, a sequence cut short, and a valid prefix before a bad byte.
BAD_UTF8 = [
    b"\xff",
    b"\x80",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
    b"ok\xfe",
]
# Parser bombs and lies: groups nested past any recursion limit, a length prefix far past
# the end, an unterminated varint, a field number 0, an end-group with no start.
BOMBS = [
    b"\xa3\x06" * 100_000,
    b"\x0a\xff\xff\xff\xff\x0f",
    b"\x08" + b"\xff" * 11,
    b"\x00\x01",
    b"\x0c",
    b"\x0a\x05abc",
]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _string_fields(rpc: Rpc) -> list[tuple[int, ...]]:
    """Field-number paths to every string field, at the top level and one message down."""
    paths: list[tuple[int, ...]] = []
    for field in rpc.input.fields:
        if field.type == field.TYPE_STRING:
            paths.append((field.number,))
        elif field.type == field.TYPE_MESSAGE and not field.message_type.GetOptions().map_entry:
            paths.extend(
                (field.number, inner.number)
                for inner in field.message_type.fields
                if inner.type == inner.TYPE_STRING
            )
    return paths or [(1,)]


def _length_delimited(path: tuple[int, ...], payload: bytes) -> bytes:
    for number in reversed(path):
        payload = _varint(number << 3 | 2) + _varint(len(payload)) + payload
    return payload


def _stream(rpc: Rpc, odd: st.SearchStrategy[bytes]) -> st.SearchStrategy[list[bytes]]:
    """One odd payload; for a client stream, placed among valid messages."""
    if not rpc.client_streaming:
        return odd.map(lambda p: [p])
    valid = messages(rpc.input).map(lambda m: m.SerializeToString())
    return st.tuples(st.lists(valid, max_size=2), odd, st.lists(valid, max_size=2)).map(
        lambda parts: [*parts[0], parts[1], *parts[2]]
    )


def _truncated(rpc: Rpc) -> st.SearchStrategy[bytes]:
    whole = messages(rpc.input).map(lambda m: m.SerializeToString()).filter(bool)
    return whole.flatmap(lambda raw: st.integers(0, len(raw) - 1).map(lambda cut: raw[:cut]))


def _bad_text(rpc: Rpc) -> st.SearchStrategy[bytes]:
    return st.builds(
        lambda path, bad, before, after: _length_delimited(path, before + bad + after),
        st.sampled_from(_string_fields(rpc)),
        st.sampled_from(BAD_UTF8),
        st.text(max_size=8).map(str.encode),
        st.text(max_size=8).map(str.encode),
    )


def _send(fuzz_target: FuzzTarget, rpc: Rpc, payloads: list[bytes]) -> None:
    outcome = invoke(fuzz_target.channel, rpc, payloads)
    check(fuzz_target.server, rpc, payloads, outcome, deadline_set=False)


@pytest.mark.slow
@pytest.mark.parametrize("rpc", RPCS, ids=str)
@settings(FUZZ, max_examples=80)
@given(data=st.data())
def test_garbage_bytes_get_invalid_argument(
    fuzz_target: FuzzTarget, rpc: Rpc, data: st.DataObject
) -> None:
    _send(fuzz_target, rpc, data.draw(_stream(rpc, st.binary(min_size=1, max_size=300))))


@pytest.mark.slow
@pytest.mark.parametrize("rpc", RPCS, ids=str)
@settings(FUZZ, max_examples=50)
@given(data=st.data())
def test_truncated_messages_get_invalid_argument(
    fuzz_target: FuzzTarget, rpc: Rpc, data: st.DataObject
) -> None:
    if not rpc.input.fields:
        pytest.skip(f"{rpc.input.name} has no fields: every message of it is empty")
    _send(fuzz_target, rpc, data.draw(_stream(rpc, _truncated(rpc))))


@pytest.mark.slow
@pytest.mark.parametrize("rpc", RPCS, ids=str)
@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_invalid_utf8_and_parser_bombs_get_invalid_argument(
    fuzz_target: FuzzTarget, rpc: Rpc, data: st.DataObject
) -> None:
    odd = st.one_of(_bad_text(rpc), st.sampled_from(BOMBS))
    _send(fuzz_target, rpc, data.draw(_stream(rpc, odd)))


def test_the_server_outlived_the_garbage(fuzz_target: FuzzTarget) -> None:
    assert fuzz_target.server.alive(), fuzz_target.server.describe_death()
