"""A scripted OpenAI-compatible server on loopback, for tests.

It speaks real HTTP/1.1 over real sockets, streams real server-sent events with chunked
transfer encoding, and so lets tests run the real ``openai.AsyncOpenAI`` client (and its
httpx transport, retries and SSE parsing) end to end. Each endpoint answers from a queue of
scripted replies; faults are part of a script. Every request is recorded, including whether
the client hung up before the response ended, which is how tests see that cancelling a run
closes the upstream stream.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import struct
import time
from collections import deque
from types import TracebackType
from typing import Any

from service.agent.tool_turns import PROBE_MESSAGES
from tests.fakes.openai_script import (
    ChatReply,
    ErrorReply,
    RecordedRequest,
    Reply,
    ToolCallScript,
    chat_events,
    completion,
    error_body,
    hashed_embedding,
)

__all__ = [
    "CHAT_PATH",
    "EMBEDDINGS_PATH",
    "ChatReply",
    "ErrorReply",
    "FakeOpenAI",
    "RecordedRequest",
    "Reply",
    "ToolCallScript",
    "hashed_embedding",
]

CHAT_PATH = "/v1/chat/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
_POLL_S = 0.005
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class _ClientGone(Exception):
    """The client closed the connection while a response was being written."""


class FakeOpenAI:
    """Async context manager serving ``/v1/chat/completions`` and ``/v1/embeddings``."""

    def __init__(self, *, embedding_dimension: int = 64, tool_fragment_size: int = 6) -> None:
        self.embedding_dimension = embedding_dimension
        self.tool_fragment_size = tool_fragment_size
        self.embedding_delay = 0.0
        self.requests: list[RecordedRequest] = []
        self.handler_tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._chat: deque[Reply] = deque()
        # The agent's tool-calling probe (service.agent.tool_turns) is answered from here,
        # not from the script, and recorded apart: scripts stay the run's own turns. Set it
        # to ChatReply.empty_body() to play llama-cpp-python.
        self.probe_reply: Reply = ChatReply.text("OK")
        self.probe_requests: list[RecordedRequest] = []
        self._embeddings: deque[ErrorReply] = deque()
        self._server: asyncio.Server | None = None
        self.port = 0

    # --- scripting and inspection ---------------------------------------------------------
    def script_chat(self, *replies: Reply) -> None:
        self._chat.extend(replies)

    def script_embeddings(self, *faults: ErrorReply) -> None:
        """Faults for the next embedding requests; without any, requests are answered."""
        self._embeddings.extend(faults)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == CHAT_PATH]

    @property
    def embedding_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == EMBEDDINGS_PATH]

    @property
    def unused_replies(self) -> int:
        return len(self._chat)

    async def wait_client_closed(self, within: float = 2.0) -> RecordedRequest:
        """The first request whose response the client abandoned, once it has."""
        async with asyncio.timeout(within):
            while True:
                for request in self.requests:
                    if request.client_closed:
                        return request
                await asyncio.sleep(_POLL_S)

    # --- lifecycle ------------------------------------------------------------------------
    async def __aenter__(self) -> FakeOpenAI:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        # Hanging up (rather than cancelling the handlers, which asyncio's server reports as
        # errors) lets every handler end the way it would if the client had gone.
        for writer in list(self._writers):
            writer.transport.abort()
        if self.handler_tasks:
            await asyncio.wait(self.handler_tasks, timeout=2.0)
        await self._server.wait_closed()

    # --- HTTP -----------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handler_tasks.add(task)
        self._writers.add(writer)
        try:
            while await self._exchange(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, _ClientGone):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self.handler_tasks.discard(task)
            self._writers.discard(writer)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serves one request; False when the connection must end."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        record = RecordedRequest(method, path, headers, json.loads(raw) if raw else {})
        probe = path == CHAT_PATH and record.body.get("messages") == PROBE_MESSAGES
        (self.probe_requests if probe else self.requests).append(record)
        io = _Exchange(record, reader, writer)
        try:
            if probe:
                keep = await self._reply(io, self.probe_reply)
            elif path == CHAT_PATH:
                keep = await self._chat_completion(io)
            elif path == EMBEDDINGS_PATH:
                keep = await self._embed(io)
            else:
                keep = await self._other_route(io)
        except _ClientGone:
            record.client_closed = True
            record.closed.set()
            raise
        record.completed = keep
        return keep

    async def _other_route(self, io: _Exchange) -> bool:
        """A path outside the OpenAI API; subclasses may serve their own."""
        return await io.json(404, error_body(f"no route for {io.record.path}", 404))

    async def _chat_completion(self, io: _Exchange) -> bool:
        if not self._chat:
            message = "fake server: no scripted chat reply left"
            return await io.json(500, error_body(message, 500), {"x-should-retry": "false"})
        return await self._reply(io, self._chat.popleft())

    async def _reply(self, io: _Exchange, reply: Reply) -> bool:
        await io.pause(reply.delay)
        if isinstance(reply, ErrorReply):
            return await io.error(reply)
        if reply.hang_up:
            io.reset()
            return False
        if io.record.streamed:
            return await self._stream_chat(io, reply)
        return await io.json(200, completion(reply))

    async def _stream_chat(self, io: _Exchange, reply: ChatReply) -> bool:
        events = chat_events(reply, io.record.body, self.tool_fragment_size)
        await io.start_stream()
        for sent, event in enumerate(events):
            if sent == reply.drop_after:
                io.writer.transport.abort()  # mid-body: the chunked encoding never ends
                return False
            if sent == reply.reset_after:
                io.reset()
                return False
            if sent == reply.end_after:
                await io.chunk(b"")  # a well-formed end of the body, just a premature one
                return True
            if sent == reply.malformed_after:
                await io.chunk(b'data: {"choices": [{"delta": {"content": "oo\n\n')
            if sent == reply.foreign_after:
                await io.chunk(b"data: " + reply.foreign_data.encode() + b"\n\n")
            if sent == reply.stall_after:
                await io.pause(reply.stall_for)
            elif sent and reply.delta_interval:
                await io.pause(reply.delta_interval)
            await io.chunk(b"data: " + event.encode() + b"\n\n")
        await io.chunk(b"data: [DONE]\n\n")
        await io.chunk(b"")
        return True

    async def _embed(self, io: _Exchange) -> bool:
        await io.pause(self.embedding_delay)
        if self._embeddings:
            fault = self._embeddings.popleft()
            await io.pause(fault.delay)
            return await io.error(fault)
        texts = io.record.body.get("input", [])
        texts = [texts] if isinstance(texts, str) else list(texts)
        as_base64 = io.record.body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector = hashed_embedding(str(text), self.embedding_dimension)
            encoded: Any = vector
            if as_base64:
                encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(str(t).split()) for t in texts)
        body = {
            "object": "list",
            "data": data,
            "model": io.record.body.get("model", ""),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return await io.json(200, body)


class _Exchange:
    """Writes one response, noticing when the client goes away."""

    def __init__(
        self, record: RecordedRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.record = record
        self.reader = reader
        self.writer = writer

    def client_gone(self) -> bool:
        # The client sends nothing while it reads a response, so EOF or a reset on the
        # read side can only mean it hung up.
        return (
            self.reader.at_eof()
            or self.reader.exception() is not None
            or self.writer.transport.is_closing()
        )

    def reset(self) -> None:
        """Aborts the connection with a TCP RST (a zero linger time), not an orderly close."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    async def pause(self, seconds: float) -> None:
        """Sleeps, but wakes up to notice the client hanging up."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self.client_gone():
                raise _ClientGone
            await asyncio.sleep(min(_POLL_S, left))
        if self.client_gone():
            raise _ClientGone

    async def _write(self, data: bytes) -> None:
        if self.client_gone():
            raise _ClientGone
        self.writer.write(data)
        try:
            await self.writer.drain()
        except ConnectionError:
            raise _ClientGone from None

    async def json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> bool:
        payload = json.dumps(body).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n{extra}\r\n"
        )
        await self._write(head.encode() + payload)
        return True

    async def error(self, reply: ErrorReply) -> bool:
        headers = {} if reply.retry_after is None else {"retry-after": str(reply.retry_after)}
        return await self.json(reply.status, error_body(reply.message, reply.status), headers)

    async def start_stream(self) -> None:
        await self._write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )

    async def chunk(self, data: bytes) -> None:
        """One chunk of the chunked body; empty data ends the body."""
        await self._write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
