"""Every RPC of the service, and hypothesis strategies for its request messages.

Messages are generated from their descriptors, not written by hand, so a field added to a
proto is fuzzed without anyone remembering to. Values lean towards the edges the contract
names (the limits in the protovalidate rules, blank and invisible text, path tricks,
numbers at and past their ranges) and mix in values that are valid, so that some requests
get past validation into the store, the agent and the session database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st
from ragagent.v1 import agent_pb2, corpus_pb2, session_pb2

MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # the server's default RAGAGENT_MAX_MESSAGE_BYTES


@dataclass(frozen=True)
class Rpc:
    """One method of one service, as the descriptors declare it."""

    service: str
    name: str
    input: Descriptor
    output: Descriptor
    client_streaming: bool
    server_streaming: bool

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.name}"

    def request_class(self) -> type[Message]:
        return message_factory.GetMessageClass(self.input)

    def response_class(self) -> type[Message]:
        return message_factory.GetMessageClass(self.output)

    def __str__(self) -> str:
        return self.name


def all_rpcs() -> list[Rpc]:
    """Every method of every service the server registers, from the generated descriptors."""
    return [
        Rpc(
            service.full_name,
            method.name,
            method.input_type,
            method.output_type,
            method.client_streaming,
            method.server_streaming,
        )
        for module in (agent_pb2, corpus_pb2, session_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    ]


# Strings at the edges: blank and invisible, control and direction characters, path tricks
# against the document-id rules, URL schemes against base_url, uuid look-alikes, injections.
EDGE_STRINGS = [
    "",
    " ",
    "\t\n\r",
    "\x00",
    "\x7f",
    "\u00a0",
    "\u200b",
    "\ufeff",
    "\u2028",
    "\ufffd\ufffd",
    "\u202eevil.md",
    "e\u0301\u0301\u0301",
    "\U0001f916 robots",
    "\U0010ffff",
    "../a.md",
    "a/../b.md",
    "/abs.md",
    "a\\b.md",
    "a//b.md",
    "./a.md",
    "a.md",
    "a.MD",
    "a.mdx",
    "a.md\x00.txt",
    "m1/urdf.md",
    "m9/missing.md",
    "http://",
    "https://example.test/docs/",
    "HTTPS://EXAMPLE.TEST",
    "ftp://example.test",
    "javascript:alert(1)",
    "%00%ff",
    "00000000-0000-0000-0000-000000000000",
    "not-a-uuid",
    "{{7*7}}",
    "'; DROP TABLE sessions; --",
    "k",
    "team.name-1_x",
    "What does a URDF file describe?",
    "How do ROS 2 nodes exchange messages?",
    "robots",
]
# Lengths just past each limit of the contract, one past the content limit, and one past the
# server's message limit (which gRPC itself refuses with RESOURCE_EXHAUSTED).
HUGE_LENGTHS = [1001, 1025, 2049, 70_000, 2 * 1024 * 1024 + 1, MAX_MESSAGE_BYTES + 1]


def strings(known: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """Any text, edge strings, uuids, ``known`` ids of the running server, and huge text."""
    huge = st.tuples(st.sampled_from(HUGE_LENGTHS), st.sampled_from(["a", " ", "é", "a.md "]))
    options: list[st.SearchStrategy[str]] = [
        st.text(max_size=40),
        st.text(max_size=40),
        st.sampled_from(EDGE_STRINGS),
        st.sampled_from(EDGE_STRINGS),
        st.uuids().map(str),
        huge.map(lambda pair: (pair[1] * pair[0])[: pair[0]]),
    ]
    if known:
        options.append(st.sampled_from(known))
    return st.one_of(options)


def _integers(bits: int, signed: bool) -> st.SearchStrategy[int]:
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    edges = [
        v for v in (0, 1, -1, 10, 11, 20, 21, 100, 101, 200, 201, low, high) if low <= v <= high
    ]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


_FLOAT_EDGES = [0.0, -0.0, 0.35, 1.0, 1.0000001, 2.0, 2.5, -1.0, float("nan"), float("inf")]
_T = FieldDescriptor
_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    _T.TYPE_BOOL: st.booleans(),
    _T.TYPE_BYTES: st.binary(max_size=64),
    _T.TYPE_FLOAT: st.one_of(st.sampled_from(_FLOAT_EDGES), st.floats(width=32)),
    _T.TYPE_DOUBLE: st.one_of(st.sampled_from(_FLOAT_EDGES), st.floats()),
    **dict.fromkeys((_T.TYPE_INT32, _T.TYPE_SINT32, _T.TYPE_SFIXED32), _integers(32, True)),
    **dict.fromkeys((_T.TYPE_INT64, _T.TYPE_SINT64, _T.TYPE_SFIXED64), _integers(64, True)),
    **dict.fromkeys((_T.TYPE_UINT32, _T.TYPE_FIXED32), _integers(32, False)),
    **dict.fromkeys((_T.TYPE_UINT64, _T.TYPE_FIXED64), _integers(64, False)),
}


def _value(
    field: FieldDescriptor, known: tuple[str, ...], depth: int
) -> st.SearchStrategy[Any] | None:
    """Values of one (non-repeated) field; None where nesting has gone deep enough."""
    if field.type == _T.TYPE_STRING:
        return strings(known)
    if field.type == _T.TYPE_ENUM:
        # proto3 enums are open: numbers no one declared must be handled too.
        declared = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(declared), _integers(32, True))
    if field.type in (_T.TYPE_MESSAGE, _T.TYPE_GROUP):
        return None if depth >= 3 else messages(field.message_type, known, depth + 1)
    return _SCALARS[field.type]


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == _T.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def _fill_map(
    draw: st.DrawFn, field: FieldDescriptor, target: Any, known: tuple[str, ...], depth: int
) -> None:
    key_field, value_field = field.message_type.fields_by_name.values()
    keys, values = _value(key_field, known, depth), _value(value_field, known, depth)
    if keys is None or values is None:
        return
    # Up to 20 pairs: past the 16 that the contract allows for metadata.
    for key, value in draw(st.dictionaries(keys, values, max_size=20)).items():
        if isinstance(value, Message):
            target[key].CopyFrom(value)
        else:
            target[key] = value


def _fill_field(
    draw: st.DrawFn, field: FieldDescriptor, message: Message, known: tuple[str, ...], depth: int
) -> None:
    values = _value(field, known, depth)
    if values is None:
        return
    target = getattr(message, field.name)
    if field.is_repeated:
        items = draw(st.lists(values, max_size=4))
        if field.type == _T.TYPE_MESSAGE:
            for item in items:
                target.add().CopyFrom(item)
        else:
            target.extend(items)
    elif field.type == _T.TYPE_MESSAGE:
        target.CopyFrom(draw(values))
    else:
        setattr(message, field.name, draw(values))


@st.composite
def messages(
    draw: st.DrawFn, descriptor: Descriptor, known: tuple[str, ...] = (), depth: int = 0
) -> Message:
    """A message of ``descriptor`` with any subset of its fields set to any values."""
    message = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if not draw(st.booleans()):
            continue  # unset: the zero value, or absent for fields with presence
        if _is_map(field):
            _fill_map(draw, field, getattr(message, field.name), known, depth)
        else:
            _fill_field(draw, field, message, known, depth)
    return message


def requests(rpc: Rpc, known: tuple[str, ...]) -> st.SearchStrategy[list[Message]]:
    """The request messages of one call: one, or a stream of up to five."""
    one = messages(rpc.input, known)
    return (
        st.lists(one, min_size=0, max_size=5)
        if rpc.client_streaming
        else st.lists(one, min_size=1, max_size=1)
    )


# Call options: a short deadline sometimes (DEADLINE_EXCEEDED is then allowed), and the
# headers the server reads (request id, caller identity) with any printable ASCII value.
deadlines = st.one_of(st.none(), st.floats(0.001, 1.0))
_header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=300)
headers = st.lists(
    st.tuples(st.sampled_from(["x-request-id", "x-user-id"]), _header_text), max_size=2
)
