"""The HTTP listener over TLS (issue 28): with RAGAGENT_TLS_CERT_FILE set it speaks HTTPS
only, with the gRPC listener's certificate; with RAGAGENT_TLS_CLIENT_CA_FILE it asks for a
client certificate as gRPC does, and the certificate names the same principal.

The server runs in the test's loop with real certificates made here (tests/security's
helpers); the callers are httpx over HTTPS with the CA and a client certificate, as a
service calling with JSON would be.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import trustme
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.http import HttpListener
from service.http.peer import bind_scope, peer_auth
from service.security.tls import ServerTls, TlsFiles
from tests.helpers import BOOKLET, Running, running_server
from tests.http.support import client_ca_file, envelope, https_client, messages
from tests.security.support import CertFiles, client_cert, server_cert, tls_channel

SPIFFE = "spiffe://example.org/ns/ci/sa/reader"
RETRIEVE = "/ragagent.v1.AgentService/Retrieve"
STATS = "/ragagent.v1.CorpusService/GetCorpusStats"
ASK = "/ragagent.v1.AgentService/Ask"
QUESTION = {"query": "What does URDF describe?"}


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


async def _post(
    srv: Running, trusted: trustme.CA, client: CertFiles | None, path: str, body: object
) -> str:
    """The outcome of one call: "OK", the Connect error code, or "refused" when the
    connection failed (TLS refused the handshake)."""
    try:
        async with https_client(srv, trusted, client) as http:
            reply = await http.post(path, json=body)
    except httpx.TransportError:
        return "refused"
    return "OK" if reply.status_code == 200 else str(reply.json()["code"])


async def test_https_serves_the_grpc_certificate_and_plaintext_is_refused(
    tmp_path: Path, ca: trustme.CA
) -> None:
    files = server_cert(ca, tmp_path)
    async with running_server(
        tmp_path / "data",
        documents=BOOKLET,
        http_address="127.0.0.1:0",
        tls_cert_file=files.cert,
        tls_key_file=files.key,
    ) as srv:
        assert srv.server.http is not None
        assert srv.server.http.tls
        async with https_client(srv, ca) as http:
            reply = await http.post(RETRIEVE, json=QUESTION)
        other_ca = await _post(srv, trustme.CA(), None, RETRIEVE, QUESTION)
        with pytest.raises(httpx.TransportError):
            async with httpx.AsyncClient(timeout=10) as plain:
                await plain.post(f"http://127.0.0.1:{srv.server.http_port}{RETRIEVE}", json={})
        async with tls_channel(srv.target, ca) as channel:
            over_grpc = await agent_pb2_grpc.AgentServiceStub(channel).Retrieve(
                agent_pb2.RetrieveRequest(query=QUESTION["query"])
            )
    assert reply.status_code == 200, reply.text
    sources = reply.json()["sources"]
    assert [s["documentId"] for s in sources] == [s.document_id for s in over_grpc.sources]
    assert sources[0]["documentId"] == "m1/urdf.md"
    assert other_ca == "refused"


async def test_mutual_tls_over_https_needs_a_certificate_that_names_the_grpc_principal(
    tmp_path: Path, ca: trustme.CA
) -> None:
    """The same cases as gRPC's (tests/security/test_tls.py): no certificate or one of
    another CA is refused at the handshake, as gRPC refuses it (UNAVAILABLE there); a
    certificate's URI SAN, else DNS SAN, else CN is the principal, with its roles."""
    files = server_cert(ca, tmp_path)
    reader = client_cert(ca, tmp_path, uri=SPIFFE, dns="reader.internal")
    asker = client_cert(ca, tmp_path, dns="asker.internal", common_name="not-this")
    nobody = client_cert(ca, tmp_path, common_name="someone")
    stranger = client_cert(trustme.CA(), tmp_path, uri=SPIFFE)
    async with running_server(
        tmp_path / "data",
        documents=BOOKLET,
        http_address="127.0.0.1:0",
        tls_cert_file=files.cert,
        tls_key_file=files.key,
        tls_client_ca_file=client_ca_file(tmp_path, ca),
        principal_roles={SPIFFE: ["corpus:read"], "asker.internal": ["ask"]},
    ) as srv:
        without_certificate = await _post(srv, ca, None, STATS, {})
        other_ca_certificate = await _post(srv, ca, stranger, STATS, {})
        results = {}
        for name, client in (("reader", reader), ("asker", asker), ("nobody", nobody)):
            results[name] = (
                await _post(srv, ca, client, STATS, {}),
                await _post(srv, ca, client, ASK, QUESTION),
            )
        # The principal owns the same sessions over both listeners.
        async with tls_channel(srv.target, ca, asker) as channel:
            asked = await agent_pb2_grpc.AgentServiceStub(channel).Ask(
                agent_pb2.QuestionRequest(query=QUESTION["query"])
            )
        listed = {}
        for name, client in (("asker", asker), ("reader", reader)):
            async with https_client(srv, ca, client) as http:
                reply = await http.post("/ragagent.v1.SessionService/ListSessions", json={})
            listed[name] = reply.json().get("sessions", []) if reply.status_code == 200 else None
    assert without_certificate == "refused"
    assert other_ca_certificate == "refused"
    assert results["reader"] == ("OK", "permission_denied")
    assert results["asker"] == ("permission_denied", "OK")
    assert results["nobody"] == ("permission_denied", "permission_denied")
    assert listed["asker"] is not None
    assert asked.session_id in [s["sessionId"] for s in listed["asker"]]
    assert listed["reader"] is None  # corpus:read only: its sessions are not its to list


async def test_ask_stream_streams_over_https_with_a_client_certificate(
    tmp_path: Path, ca: trustme.CA
) -> None:
    files = server_cert(ca, tmp_path)
    asker = client_cert(ca, tmp_path, uri="spiffe://example.org/asker")
    events: list[dict[str, Any]] = []
    async with (
        running_server(
            tmp_path / "data",
            documents=BOOKLET,
            http_address="127.0.0.1:0",
            tls_cert_file=files.cert,
            tls_key_file=files.key,
            tls_client_ca_file=client_ca_file(tmp_path, ca),
            principal_roles={"*": ["ask"]},
            access_unlabelled="public",
        ) as srv,
        https_client(srv, ca, asker) as http,
        http.stream(
            "POST",
            "/ragagent.v1.AgentService/AskStream",
            content=envelope(QUESTION),
            headers={"content-type": "application/connect+json"},
        ) as reply,
    ):
        events = [event async for event in messages(reply)]
    assert reply.status_code == 200
    kinds = [next(key for key in event if key != "sequence") for event in events[:-1]]
    assert kinds[0] == "runStarted"
    assert "answerDelta" in kinds
    assert kinds[-1] == "completed"
    assert "m1/urdf.md" in json.dumps(events)
    assert "error" not in events[-1]  # the end-of-stream message: no error


async def test_the_http_call_gets_the_auth_context_grpc_gives_the_same_certificate(
    tmp_path: Path, ca: trustme.CA
) -> None:
    """What authentication reads (grpc's auth-context keys) is the same over both
    listeners for one client certificate; HTTP leaves out only what the ssl module
    cannot tell (session reuse, key exchange group)."""
    files = server_cert(ca, tmp_path)
    client = client_cert(
        ca,
        tmp_path,
        uri=SPIFFE,
        dns="reader.internal",
        common_name="bot+1, of robotics",  # characters a distinguished name escapes
        units=("robotics", "ci"),
        emails=("bot@example.org",),
        ips=("10.0.0.7", "::1"),
    )
    tls = ServerTls(TlsFiles(files.cert, files.key, client_ca_file(tmp_path, ca)))
    seen: dict[str, dict[str, tuple[bytes, ...]]] = {}

    async def unary(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        seen["grpc"] = {k: tuple(v) for k, v in context.auth_context().items()}
        return b""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        bind_scope(scope)
        seen["http"] = peer_auth()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(unary)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("t.T", {"M": handler})])
    port = server.add_secure_port("127.0.0.1:0", tls.credentials())
    listener = HttpListener(app, "127.0.0.1:0", ssl_context=tls.https())
    await server.start()
    http_port = await listener.start()
    try:
        async with tls_channel(f"127.0.0.1:{port}", ca, client) as channel:
            await channel.unary_unary("/t.T/M")(b"")
        async with https_client(http_port, ca, client) as http:
            assert (await http.get("/")).status_code == 204
    finally:
        await listener.stop(0)
        await server.stop(0)
    http_auth, grpc_auth = seen["http"], seen["grpc"]
    assert set(grpc_auth) - set(http_auth) <= {
        "ssl_session_reused",
        "ssl_negotiated_key_exchange_group",
    }
    assert http_auth == {key: grpc_auth[key] for key in http_auth}
    assert http_auth["x509_pem_cert"] == (client.cert.read_bytes(),)
    assert http_auth["peer_spiffe_id"] == (SPIFFE.encode(),)
