"""Calling any RPC with raw bytes, and the statuses each RPC may answer.

Requests go through a generic channel (no serializer on either side), so the same code
sends generated messages, truncated ones and garbage, and the server alone decides what it
can parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc
from google.protobuf.message import DecodeError
from hypothesis import event

from tests.fuzz.strategies import MAX_MESSAGE_BYTES, Rpc
from tests.processes import ServerProcess

Code = grpc.StatusCode

# What each RPC may answer to any request when nothing around it fails, from README's error
# table: UNAVAILABLE, RESOURCE_EXHAUSTED (the model's) and FAILED_PRECONDITION need a store,
# a database or a model that fails, and none does here (embedded stores, extractive answers).
# INTERNAL and UNKNOWN are never allowed: they are bugs.
ALLOWED: dict[str, frozenset[Code]] = {
    # A session id that does not exist, or is another caller's: NOT_FOUND; one with a turn
    # still running: ABORTED.
    # Background runs beyond RAGAGENT_RUN_MAX_PER_CALLER: RESOURCE_EXHAUSTED.
    "Ask": frozenset(
        {Code.OK, Code.INVALID_ARGUMENT, Code.NOT_FOUND, Code.ABORTED, Code.RESOURCE_EXHAUSTED}
    ),
    "AskStream": frozenset(
        {Code.OK, Code.INVALID_ARGUMENT, Code.NOT_FOUND, Code.ABORTED, Code.RESOURCE_EXHAUSTED}
    ),
    "Retrieve": frozenset({Code.OK, Code.INVALID_ARGUMENT}),
    # A run id nobody was given: NOT_FOUND (ids are unguessable).
    "ResumeStream": frozenset({Code.OK, Code.INVALID_ARGUMENT, Code.NOT_FOUND}),
    "CancelRun": frozenset({Code.OK, Code.INVALID_ARGUMENT, Code.NOT_FOUND}),
    "IngestDocuments": frozenset({Code.OK, Code.INVALID_ARGUMENT}),
    "DeleteDocument": frozenset({Code.OK, Code.INVALID_ARGUMENT, Code.NOT_FOUND}),
    "ListDocuments": frozenset({Code.OK, Code.INVALID_ARGUMENT}),
    "GetCorpusStats": frozenset({Code.OK}),
    "GetSession": frozenset({Code.OK, Code.INVALID_ARGUMENT, Code.NOT_FOUND}),
    "ListSessions": frozenset({Code.OK, Code.INVALID_ARGUMENT}),
    "DeleteSession": frozenset({Code.OK, Code.INVALID_ARGUMENT, Code.NOT_FOUND}),
}
# Safety net only: no call of a healthy server comes near it, so hitting it is a hang.
CALL_TIMEOUT_S = 60.0


@dataclass
class Outcome:
    code: Code
    details: str
    responses: list[bytes] = field(default_factory=list)


def decodable(rpc: Rpc, payload: bytes) -> bool:
    """Whether the server's deserializer (the same generated class) can parse ``payload``."""
    try:
        rpc.request_class().FromString(payload)
    except DecodeError:
        return False
    return True


def expected(rpc: Rpc, payloads: Sequence[bytes], *, deadline_set: bool) -> frozenset[Code]:
    """The statuses a call may end with: bytes no parser accepts are the caller's fault."""
    if all(decodable(rpc, p) for p in payloads):
        codes = set(ALLOWED[rpc.name])
    else:
        codes = {Code.INVALID_ARGUMENT}
    if deadline_set:
        codes.add(Code.DEADLINE_EXCEEDED)
    if any(len(p) > MAX_MESSAGE_BYTES for p in payloads):
        codes.add(Code.RESOURCE_EXHAUSTED)  # gRPC's own limit on a received message
    return frozenset(codes)


def invoke(
    channel: grpc.Channel,
    rpc: Rpc,
    payloads: Sequence[bytes],
    *,
    deadline: float | None = None,
    metadata: Sequence[tuple[str, str]] = (),
) -> Outcome:
    """Sends ``payloads`` as the request(s) of ``rpc`` and reads the whole answer."""
    options = {"timeout": deadline or CALL_TIMEOUT_S, "metadata": tuple(metadata)}
    raw = {"request_serializer": None, "response_deserializer": None}
    try:
        if rpc.client_streaming:
            reply = channel.stream_unary(rpc.path, **raw)(iter(payloads), **options)
            return Outcome(Code.OK, "", [reply])
        (payload,) = payloads
        if rpc.server_streaming:
            return Outcome(
                Code.OK, "", list(channel.unary_stream(rpc.path, **raw)(payload, **options))
            )
        return Outcome(Code.OK, "", [channel.unary_unary(rpc.path, **raw)(payload, **options)])
    except grpc.RpcError as error:
        return Outcome(error.code(), error.details() or "")  # type: ignore[attr-defined]


def check(
    server: ServerProcess,
    rpc: Rpc,
    payloads: Sequence[bytes],
    outcome: Outcome,
    *,
    deadline_set: bool,
    request: object = None,
) -> None:
    """Fails with what was sent and what came back when the status is not an allowed one."""
    allowed = expected(rpc, payloads, deadline_set=deadline_set)
    # Tallied in --hypothesis-show-statistics: how much got past the parser and validation.
    parsed = all(decodable(rpc, p) for p in payloads)
    event(f"{'decodable' if parsed else 'undecodable'} -> {outcome.code.name}")
    if outcome.code in allowed:
        if outcome.code == Code.OK:
            for response in outcome.responses:
                rpc.response_class().FromString(response)  # the server sent a valid message
        return
    sent = repr(request) if request is not None else repr([p[:200] for p in payloads])
    raise AssertionError(
        f"{rpc.name} answered {outcome.code.name} ({outcome.details[:300]!r}); "
        f"allowed {sorted(c.name for c in allowed)}; sent {sent[:600]}\n"
        f"{server.describe_death() if not server.alive() else ''}"
    )
