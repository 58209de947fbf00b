"""``ragagent ask``: the command-line client. Prints the answer as it streams, then sources."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from ragagent.v1 import agent_pb2, agent_pb2_grpc, types_pb2

from service.commands.channel import (
    add_connection_flags,
    connection,
    open_channel,
    print_rpc_error,
)
from service.commands.flags import Flag, settings_with_flags


def register(commands: Any) -> None:
    ask = commands.add_parser("ask", help="ask a running server a question, streaming the answer")
    ask.add_argument("question", help="the question (1-1000 characters)")
    ask.add_argument("--address", help="HOST:PORT of the server (RAGAGENT_ADDRESS)")
    ask.add_argument("--session", default="", help="session id to continue a conversation")
    ask.add_argument("--max-results", type=int, help="sources per search (1-10)")
    ask.add_argument("--timeout", type=float, default=120.0, help="deadline in seconds")
    ask.add_argument(
        "--user",
        default="",
        help="caller identity sent as x-user-id (honoured only by a server without authentication)",
    )
    ask.add_argument("--json", action="store_true", help="print the final response as JSON")
    add_connection_flags(ask)
    ask.set_defaults(run=run_ask)


async def run_ask(args: argparse.Namespace) -> int:
    settings = settings_with_flags(Flag("--address", "address", args.address))
    request = agent_pb2.QuestionRequest(query=args.question, session_id=args.session)
    if args.max_results is not None:
        request.max_results = args.max_results
    metadata = (("x-user-id", args.user),) if args.user else ()
    conn = connection(args, settings.address)
    async with open_channel(conn) as channel:
        try:
            final = await stream_answer(
                channel,
                request,
                out=sys.stdout,
                deadline_s=args.timeout,
                metadata=metadata,
                live=not args.json,
            )
        except grpc.aio.AioRpcError as error:
            print_rpc_error(error, conn, "")
            return 1
    if args.json:
        print(json.dumps(message_json(final), indent=2))
    return 0 if final.status in _ANSWERED else 3


def message_json(message: Message) -> Any:
    """The message as grpcurl prints it, so that scripts read the same names either way: the
    .proto field names (snake_case, like ``ingest --json``), and whole numbers without ".0"
    (a Struct holds every number as a double; Go's encoder prints 5.0 as 5)."""
    return _whole(json_format.MessageToDict(message, preserving_proto_field_name=True))


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    return value


_ANSWERED = (agent_pb2.RESPONSE_STATUS_SUCCESS, agent_pb2.RESPONSE_STATUS_NO_ANSWER)


async def stream_answer(
    channel: grpc.aio.Channel,
    request: agent_pb2.QuestionRequest,
    *,
    out: TextIO,
    deadline_s: float | None = None,
    metadata: tuple[tuple[str, str], ...] = (),
    live: bool = True,
) -> agent_pb2.AgentResponse:
    """Streams one question; with ``live`` writes deltas as they come, then the sources."""
    call = agent_pb2_grpc.AgentServiceStub(channel).AskStream(
        request, timeout=deadline_s, metadata=metadata
    )
    final = agent_pb2.AgentResponse()
    async for event in call:
        kind = event.WhichOneof("event")
        if kind == "answer_delta" and live:
            out.write(event.answer_delta.text)
            out.flush()
        elif kind == "tool_call_started" and live and _executing(event.tool_call_started):
            query = event.tool_call_started.arguments.fields.get("query")
            searched = query.string_value if query is not None else ""
            out.write(f"[searching: {searched}]\n")
        elif kind == "completed":
            final = event.completed
    if live:
        out.write("\n\n")
        _print_sources(final, out)
    return final


def _print_sources(final: agent_pb2.AgentResponse, out: TextIO) -> None:
    status = agent_pb2.ResponseStatus.Name(final.status).removeprefix("RESPONSE_STATUS_")
    mode = agent_pb2.AnswerMode.Name(final.answer_mode).removeprefix("ANSWER_MODE_").lower()
    out.write(
        f"status {status} · {mode} ({final.strategy}, {final.model}) · "
        f"confidence {final.confidence:.2f} · session {final.session_id}\n"
    )
    for source in final.sources:
        if not source.citation:
            continue
        where = source.url or source.document_id
        heading = f" — {source.heading}" if source.heading else ""
        out.write(
            f"  [{source.citation}] {source.title}{heading} ({where}) score {source.score:.2f}\n"
        )


def _executing(call: types_pb2.ToolCallInfo) -> bool:
    """Each call is announced twice, PENDING then EXECUTING; the search is shown once."""
    return call.status == types_pb2.TOOL_CALL_STATUS_EXECUTING
