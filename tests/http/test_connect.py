"""The HTTP listener (service/http): every RPC over Connect (JSON and binary) and gRPC-Web,
with the rules gRPC callers get: validation with BadRequest details, authentication and
roles, shared rate limits, request ids, deadlines, cancellation, CORS.

The server runs in the test's loop (tests/helpers.running_server) with
RAGAGENT_HTTP_ADDRESS on port 0; the callers are plain HTTP (httpx) and connectrpc's own
Python client from the generated code (generated/ragagent/v1/*_connect.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.protocol import ProtocolType
from google.rpc import error_details_pb2
from ragagent.v1 import agent_connect, agent_pb2, agent_pb2_grpc, corpus_connect, corpus_pb2

from tests.fakes.openai_script import ChatReply
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import BOOKLET, Running, running_server
from tests.security.support import new_key

JSON = {"content-type": "application/json"}


def _url(srv: Running) -> str:
    return f"http://127.0.0.1:{srv.server.http_port}"


async def _post(srv: Running, path: str, body: object, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=_url(srv), timeout=30) as client:
        return await client.post(path, json=body, headers=headers)


def _details(body: dict[str, object]) -> dict[str, bytes]:
    """type name -> serialized detail of a Connect error body."""
    found = {}
    for detail in body.get("details", []):  # type: ignore[attr-defined]
        found[detail["type"]] = base64.b64decode(detail["value"] + "===")
    return found


async def test_retrieve_over_connect_json_is_what_grpc_answers(tmp_path: Path) -> None:
    async with running_server(tmp_path, documents=BOOKLET, http_address="127.0.0.1:0") as srv:
        reply = await _post(
            srv, "/ragagent.v1.AgentService/Retrieve", {"query": "What does URDF describe?"}
        )
        over_grpc = await agent_pb2_grpc.AgentServiceStub(srv.channel).Retrieve(
            agent_pb2.RetrieveRequest(query="What does URDF describe?")
        )
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    sources = reply.json()["sources"]
    assert [s["documentId"] for s in sources] == [s.document_id for s in over_grpc.sources]
    assert sources[0]["documentId"] == "m1/urdf.md"


async def test_every_rpc_of_the_four_services_is_served(tmp_path: Path) -> None:
    """No method is left to 404/unimplemented: each answers with the servicer's own outcome."""
    async with running_server(tmp_path, documents=BOOKLET, http_address="127.0.0.1:0") as srv:
        unary = {
            "/ragagent.v1.AgentService/Ask": {"query": "What is URDF?"},
            "/ragagent.v1.AgentService/Retrieve": {"query": "URDF"},
            "/ragagent.v1.CorpusService/DeleteDocument": {"documentId": "no/such.md"},
            "/ragagent.v1.CorpusService/ListDocuments": {},
            "/ragagent.v1.CorpusService/GetCorpusStats": {},
            "/ragagent.v1.SessionService/ListSessions": {},
            "/ragagent.v1.SessionService/GetSession": {"sessionId": "nope"},
            "/ragagent.v1.SessionService/DeleteSession": {"sessionId": "nope"},
            "/grpc.health.v1.Health/Check": {},
        }
        outcomes = {}
        for path, body in unary.items():
            reply = await _post(srv, path, body)
            outcomes[path] = reply.status_code, reply.json().get("code", "ok")
        unknown = await _post(srv, "/ragagent.v1.AgentService/NoSuchMethod", {})
        async with agent_connect.AgentServiceClient(_url(srv)) as agent:
            kinds = [
                event.WhichOneof("event")
                async for event in agent.ask_stream(agent_pb2.QuestionRequest(query="URDF?"))
            ]
        async with corpus_connect.CorpusServiceClient(_url(srv)) as corpus:
            ingested = await corpus.ingest_documents(_documents({"m9/new.md": "# New\n\nText."}))
    assert outcomes["/ragagent.v1.AgentService/Ask"] == (200, "ok")
    assert outcomes["/ragagent.v1.CorpusService/DeleteDocument"] == (404, "not_found")
    assert outcomes["/ragagent.v1.SessionService/GetSession"][0] in (400, 404)
    assert all(status in (200, 400, 404) for status, _ in outcomes.values()), outcomes
    assert unknown.status_code == 404
    assert kinds[0] == "run_started"
    assert kinds[-1] == "completed"
    assert "answer_delta" in kinds
    assert ingested.documents_added == 1


async def _documents(docs: dict[str, str]) -> AsyncIterator[corpus_pb2.IngestDocumentsRequest]:
    for path, content in docs.items():
        yield corpus_pb2.IngestDocumentsRequest(
            document=corpus_pb2.Document(path=path, content=content)
        )


async def test_invalid_request_is_400_with_bad_request_details_and_request_id(
    tmp_path: Path,
) -> None:
    async with running_server(tmp_path, documents=BOOKLET, http_address="127.0.0.1:0") as srv:
        reply = await _post(
            srv, "/ragagent.v1.AgentService/Retrieve", {"query": ""}, **{"x-request-id": "req-1"}
        )
        async with httpx.AsyncClient(base_url=_url(srv)) as client:
            garbled = await client.post(
                "/ragagent.v1.AgentService/Retrieve", content=b"{not json", headers=JSON
            )
    assert reply.status_code == 400
    assert reply.headers["x-request-id"] == "req-1"
    body = reply.json()
    assert body["code"] == "invalid_argument"
    bad = error_details_pb2.BadRequest.FromString(_details(body)["google.rpc.BadRequest"])
    assert {v.field for v in bad.field_violations} == {"query"}
    assert garbled.status_code == 400
    undecodable = error_details_pb2.BadRequest.FromString(
        _details(garbled.json())["google.rpc.BadRequest"]
    )
    assert undecodable.field_violations[0].reason == "request.undecodable"


async def test_binary_connect_and_grpc_web_stream_the_same_answer(tmp_path: Path) -> None:
    question = agent_pb2.QuestionRequest(query="What does a URDF file describe?")
    answers = {}
    async with running_server(tmp_path, documents=BOOKLET, http_address="127.0.0.1:0") as srv:
        for protocol in (ProtocolType.CONNECT, ProtocolType.GRPC_WEB):
            async with agent_connect.AgentServiceClient(_url(srv), protocol=protocol) as client:
                events = [event async for event in client.ask_stream(question)]
            assert events[-1].HasField("completed"), protocol
            answers[protocol] = events[-1].completed.answer
    assert answers[ProtocolType.CONNECT] == answers[ProtocolType.GRPC_WEB]
    assert "[1]" in answers[ProtocolType.CONNECT]


async def test_keys_roles_and_rate_limits_hold_over_http(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    _, asker = new_key(keys, "reader", "ask")
    async with running_server(
        tmp_path / "data",
        documents=BOOKLET,
        http_address="127.0.0.1:0",
        api_keys_file=keys,
        rate_limit_requests_per_minute=2,
    ) as srv:
        anonymous = await _post(srv, "/ragagent.v1.AgentService/Retrieve", {"query": "URDF"})
        wrong = await _post(
            srv,
            "/ragagent.v1.AgentService/Retrieve",
            {"query": "URDF"},
            authorization="Bearer rak_000000000000_" + "A" * 43,
        )
        auth = {"authorization": f"Bearer {asker}"}
        allowed = await _post(srv, "/ragagent.v1.AgentService/Retrieve", {"query": "URDF"}, **auth)
        denied = await _post(
            srv, "/ragagent.v1.CorpusService/DeleteDocument", {"documentId": "m1/urdf.md"}, **auth
        )
        # One bucket per principal across both listeners: one taken over HTTP, one over gRPC.
        await agent_pb2_grpc.AgentServiceStub(srv.channel).Retrieve(
            agent_pb2.RetrieveRequest(query="URDF"), metadata=tuple(auth.items())
        )
        limited = await _post(srv, "/ragagent.v1.AgentService/Retrieve", {"query": "URDF"}, **auth)
    assert (anonymous.status_code, anonymous.json()["code"]) == (401, "unauthenticated")
    assert (wrong.status_code, wrong.json()["code"]) == (401, "unauthenticated")
    assert allowed.status_code == 200, allowed.text
    assert (denied.status_code, denied.json()["code"]) == (403, "permission_denied")
    assert "corpus:write" in denied.json()["message"]
    assert (limited.status_code, limited.json()["code"]) == (429, "resource_exhausted")
    assert "google.rpc.RetryInfo" in _details(limited.json())


async def test_connect_timeout_ends_a_slow_answer_with_deadline_exceeded(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(ChatReply.text("URDF " * 50, pieces=50, delta_interval=0.1))
    async with (
        running_server(
            tmp_path,
            documents=BOOKLET,
            http_address="127.0.0.1:0",
            llm_base_url=fake_llm.base_url,
            agent_strategy="retrieve_first",
        ) as srv,
        agent_connect.AgentServiceClient(_url(srv)) as client,
    ):
        events: list[agent_pb2.AskStreamResponse] = []

        async def read() -> None:
            async for event in client.ask_stream(
                agent_pb2.QuestionRequest(query="What does URDF describe?"), timeout_ms=1500
            ):
                events.append(event)

        with pytest.raises(ConnectError) as caught:
            await read()
    assert caught.value.code is Code.DEADLINE_EXCEEDED
    # The run stopped itself before the deadline and said so in its final message.
    assert events[-1].HasField("completed")
    assert events[-1].completed.status == agent_pb2.RESPONSE_STATUS_TIMEOUT


async def test_closing_the_connection_closes_the_model_stream(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script_chat(ChatReply.text("URDF " * 40, pieces=40, delta_interval=0.1))
    async with running_server(
        tmp_path,
        documents=BOOKLET,
        http_address="127.0.0.1:0",
        llm_base_url=fake_llm.base_url,
        agent_strategy="retrieve_first",
    ) as srv:
        async with (
            httpx.AsyncClient(base_url=_url(srv), timeout=30) as client,
            client.stream(
                "POST",
                "/ragagent.v1.AgentService/AskStream",
                content=_envelope({"query": "What does URDF describe?"}),
                headers={"content-type": "application/connect+json"},
            ) as reply,
        ):
            async for chunk in reply.aiter_bytes():
                if b"answerDelta" in chunk:
                    break  # leaving the block closes the connection mid-answer
        closed = await fake_llm.wait_client_closed(within=5)
    assert closed.client_closed


def _envelope(message: dict[str, object]) -> bytes:
    data = json.dumps(message).encode()
    return b"\x00" + len(data).to_bytes(4, "big") + data


async def test_cors_allows_only_the_listed_origins(tmp_path: Path) -> None:
    preflight = {
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type,connect-protocol-version",
    }
    async with (
        running_server(
            tmp_path,
            documents=BOOKLET,
            http_address="127.0.0.1:0",
            http_cors_origins="https://book.example",
        ) as srv,
        httpx.AsyncClient(base_url=_url(srv)) as client,
    ):
        path = "/ragagent.v1.AgentService/Retrieve"
        listed = await client.options(path, headers={**preflight, "origin": "https://book.example"})
        other = await client.options(path, headers={**preflight, "origin": "https://evil.test"})
        call = await client.post(
            path, json={"query": "URDF"}, headers={"origin": "https://book.example"}
        )
        foreign = await client.post(
            path, json={"query": "URDF"}, headers={"origin": "https://evil.test"}
        )
    assert listed.status_code == 204
    assert listed.headers["access-control-allow-origin"] == "https://book.example"
    allowed = listed.headers["access-control-allow-headers"]
    assert "connect-protocol-version" in allowed
    assert "x-grpc-web" in allowed
    assert "authorization" in allowed
    assert "grpc-status" in listed.headers["access-control-expose-headers"]
    assert other.status_code == 403
    assert "access-control-allow-origin" not in other.headers
    assert call.headers["access-control-allow-origin"] == "https://book.example"
    assert "access-control-allow-origin" not in foreign.headers


async def test_the_http_listener_is_off_by_default_and_a_busy_port_is_a_clear_error(
    tmp_path: Path,
) -> None:
    async with running_server(tmp_path / "a", http_address="127.0.0.1:0") as first:
        port = first.server.http_port
        async with running_server(tmp_path / "b") as plain:
            assert plain.server.http is None
        from service.errors import ConfigurationError

        with pytest.raises(ConfigurationError, match="RAGAGENT_HTTP_ADDRESS"):
            async with running_server(tmp_path / "c", http_address=f"127.0.0.1:{port}"):
                pass
    with pytest.raises(ConfigurationError, match="make web"):
        async with running_server(
            tmp_path / "d", http_address="127.0.0.1:0", http_web=True, http_web_dir=tmp_path
        ):
            pass


async def test_shutdown_stops_both_listeners(tmp_path: Path) -> None:
    async with running_server(tmp_path, http_address="127.0.0.1:0") as srv:
        url = _url(srv)
        await srv.server.stop(0.5)
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient(base_url=url) as client:
                await client.post("/grpc.health.v1.Health/Check", json={})
        with pytest.raises(grpc.aio.AioRpcError):
            await asyncio.wait_for(
                agent_pb2_grpc.AgentServiceStub(srv.channel).Retrieve(
                    agent_pb2.RetrieveRequest(query="x"), timeout=2
                ),
                5,
            )


async def test_health_watch_streams_over_connect(tmp_path: Path) -> None:
    """grpc's health servicer writes with context.write(): its first status arrives as a
    Connect stream message, and leaving the stream ends the servicer's task."""
    async with (
        running_server(tmp_path, http_address="127.0.0.1:0") as srv,
        httpx.AsyncClient(base_url=_url(srv), timeout=30) as client,
        client.stream(
            "POST",
            "/grpc.health.v1.Health/Watch",
            content=_envelope({}),
            headers={"content-type": "application/connect+json"},
        ) as reply,
    ):
        received = b""
        async for chunk in reply.aiter_bytes():
            received += chunk
            if len(received) >= 5 and len(received) >= 5 + int.from_bytes(received[1:5], "big"):
                break
    assert reply.status_code == 200
    assert json.loads(received[5:])["status"] == "SERVING"


def test_the_listening_socket_gives_streams_tcp_nodelay() -> None:
    """asyncio sets TCP_NODELAY on accepted sockets only when the listener names
    IPPROTO_TCP; without it each streamed message after the first waited for the client's
    delayed ACK (+40 ms to the first answer delta, measured with tests/bench/bench_http.py)."""
    import socket

    from service.http.listener import _bind

    sock = _bind("127.0.0.1:0")
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
