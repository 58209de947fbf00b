"""What the fake OpenAI server is told to answer, and the JSON it answers with."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCallScript:
    """A function call the scripted model makes; ``arguments`` is raw text, valid or not."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:12]}")


@dataclass
class ChatReply:
    """One scripted chat completion, optionally with faults.

    Fault positions count server-sent events written so far (the first event is the
    assistant-role chunk, then one per text delta or tool-call fragment).
    """

    deltas: list[str] = field(default_factory=list)
    tool_calls: list[ToolCallScript] = field(default_factory=list)
    finish_reason: str | None = None  # default: "tool_calls" with calls, else "stop"
    prompt_tokens: int = 11
    completion_tokens: int = 7
    model: str = "fake-model"
    delay: float = 0.0  # before the first byte of the response
    delta_interval: float = 0.0  # pause between events, to make a stream slow
    stall_after: int | None = None
    stall_for: float = 0.0
    malformed_after: int | None = None  # send an event whose data is not JSON
    # Send ``foreign_data`` (JSON, but not a Chat Completions chunk) before this event.
    foreign_after: int | None = None
    foreign_data: str = "{}"
    drop_after: int | None = None  # close the connection mid-body
    reset_after: int | None = None  # reset the connection (TCP RST) mid-body
    # End the body cleanly (HTTP-wise) before this event: no finish reason, no [DONE]. 0 is
    # an HTTP 200 with an empty body, which llama.cpp sends for a prompt overflowing its window.
    end_after: int | None = None
    # Reset the connection instead of answering, as a server closing a keep-alive
    # connection that the client's pool is about to reuse.
    hang_up: bool = False

    @classmethod
    def text(cls, text: str, *, pieces: int = 3, **options: Any) -> ChatReply:
        """A text answer cut into ``pieces`` deltas of about equal length."""
        size = max(1, math.ceil(len(text) / pieces))
        return cls(deltas=[text[i : i + size] for i in range(0, len(text), size)], **options)

    @classmethod
    def empty_body(cls, **options: Any) -> ChatReply:
        """HTTP 200 for a stream whose body ends at once: not a single event."""
        return cls(end_after=0, **options)

    @classmethod
    def calls(cls, *calls: ToolCallScript, **options: Any) -> ChatReply:
        return cls(tool_calls=list(calls), **options)


@dataclass
class ErrorReply:
    """An HTTP error response in OpenAI's error format."""

    status: int
    message: str = "scripted failure"
    retry_after: float | None = None
    delay: float = 0.0


Reply = ChatReply | ErrorReply


@dataclass
class RecordedRequest:
    """What the client sent, and how the exchange ended."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    completed: bool = False  # the whole response was written
    client_closed: bool = False  # the client hung up before the response ended
    closed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))


def chat_events(reply: ChatReply, body: dict[str, Any], fragment_size: int) -> list[str]:
    """The server-sent events of a streamed reply, as JSON texts, without [DONE]."""
    ident = f"chatcmpl-{uuid.uuid4().hex[:16]}"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return json.dumps(_envelope(ident, reply.model, [choice], "chat.completion.chunk"))

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": text}) for text in reply.deltas]
    size = fragment_size
    for index, call in enumerate(reply.tool_calls):
        # As real servers do: id and name first, then the arguments in fragments.
        function = {"name": call.name, "arguments": ""}
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call.id,
                            "type": "function",
                            "function": function,
                        }
                    ]
                }
            )
        )
        for start in range(0, len(call.arguments), size):
            piece = call.arguments[start : start + size]
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    events.append(chunk({}, finish_reason(reply)))
    if (body.get("stream_options") or {}).get("include_usage"):
        last = _envelope(ident, reply.model, [], "chat.completion.chunk")
        last["usage"] = usage(reply)
        events.append(json.dumps(last))
    return events


def hashed_embedding(text: str, dimension: int) -> list[float]:
    """A deterministic bag-of-words vector: texts sharing words point the same way."""
    vector = [0.0] * dimension
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        index = int.from_bytes(digest[:4], "big") % dimension
        vector[index] += 1.0 if digest[4] % 2 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0:
        return [1.0] + [0.0] * (dimension - 1)
    return [x / norm for x in vector]


def finish_reason(reply: ChatReply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def usage(reply: ChatReply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def _envelope(ident: str, model: str, choices: list[Any], kind: str) -> dict[str, Any]:
    return {
        "id": ident,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }


def completion(reply: ChatReply) -> dict[str, Any]:
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in reply.tool_calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(reply.deltas) or None}
    if calls:
        message["tool_calls"] = calls
    choice = {
        "index": 0,
        "message": message,
        "finish_reason": finish_reason(reply),
        "logprobs": None,
    }
    body = _envelope(f"chatcmpl-{uuid.uuid4().hex[:16]}", reply.model, [choice], "chat.completion")
    body["usage"] = usage(reply)
    return body


def error_body(message: str, status: int) -> dict[str, Any]:
    kinds = {401: "invalid_api_key", 403: "permission_denied", 429: "rate_limit_exceeded"}
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error" if status < 500 else "server_error",
            "param": None,
            "code": kinds.get(status),
        }
    }
