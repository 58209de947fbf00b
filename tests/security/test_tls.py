"""TLS and mutual TLS against the real server, with certificates made in the test: who can
connect at all, and which principal a client certificate makes."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
import trustme
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ragagent.v1 import agent_pb2, agent_pb2_grpc, session_pb2, session_pb2_grpc

from service.config import Settings
from service.errors import ConfigurationError
from service.security.tls import certificate_principal
from service.wiring.security import Security
from tests.helpers import running_server
from tests.security.support import (
    EVERY_RPC,
    bearer,
    client_cert,
    new_key,
    outcome,
    server_cert,
    tls_channel,
)

SPIFFE = "spiffe://example.org/ns/ci/sa/reader"


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


async def _health(channel: grpc.aio.Channel) -> str:
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
    except grpc.aio.AioRpcError as error:
        return error.code().name
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


async def test_tls_serves_only_clients_that_speak_tls_and_trust_its_ca(
    tmp_path: Path, ca: trustme.CA
) -> None:
    files = server_cert(ca, tmp_path)
    async with running_server(
        tmp_path / "data", tls_cert_file=files.cert, tls_key_file=files.key
    ) as srv:
        async with tls_channel(srv.target, ca) as channel:
            trusted = await _health(channel)
        async with tls_channel(srv.target, trustme.CA()) as channel:
            other_ca = await _health(channel)
        async with grpc.aio.insecure_channel(srv.target) as channel:
            plaintext = await _health(channel)
    assert trusted == "SERVING"
    assert other_ca == "UNAVAILABLE"
    assert plaintext == "UNAVAILABLE"


async def test_mutual_tls_needs_a_client_certificate_which_names_the_principal(
    tmp_path: Path, ca: trustme.CA
) -> None:
    files = server_cert(ca, tmp_path)
    reader = client_cert(ca, tmp_path, uri=SPIFFE, dns="reader.internal")
    asker = client_cert(ca, tmp_path, dns="asker.internal", common_name="not-this")
    nobody = client_cert(ca, tmp_path, common_name="someone")
    stranger = client_cert(trustme.CA(), tmp_path, uri=SPIFFE)
    roles = {SPIFFE: ["corpus:read"], "asker.internal": ["ask"]}
    _, rpc_stats = EVERY_RPC["GetCorpusStats"]
    _, rpc_ask = EVERY_RPC["Ask"]
    async with running_server(
        tmp_path / "data",
        tls_cert_file=files.cert,
        tls_key_file=files.key,
        tls_client_ca_file=Path(_write_ca(ca, tmp_path)),
        principal_roles=roles,
    ) as srv:
        async with tls_channel(srv.target, ca) as channel:
            without_certificate = await _health(channel)
        async with tls_channel(srv.target, ca, stranger) as channel:
            other_ca_certificate = await _health(channel)
        results = {}
        for name, client in (("reader", reader), ("asker", asker), ("nobody", nobody)):
            async with tls_channel(srv.target, ca, client) as channel:
                results[name] = (
                    await outcome(rpc_stats, channel, ()),
                    await outcome(rpc_ask, channel, ()),
                )
    assert without_certificate == "UNAVAILABLE"
    assert other_ca_certificate == "UNAVAILABLE"
    assert results["reader"] == ("OK", "PERMISSION_DENIED/PERMISSION_DENIED")
    assert results["asker"] == ("PERMISSION_DENIED/PERMISSION_DENIED", "OK")
    assert results["nobody"] == ("PERMISSION_DENIED/PERMISSION_DENIED",) * 2


def _write_ca(ca: trustme.CA, folder: Path) -> str:
    path = folder / "client-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


async def test_sessions_belong_to_the_certificate_and_an_aliased_api_key_can_stand_in(
    tmp_path: Path, ca: trustme.CA
) -> None:
    """Over mutual TLS a bearer key, when sent, names the principal instead of the
    certificate. Owners are namespaced by how they authenticated (key:..., cert:...), so a
    key named like a certificate owns nothing of the certificate's until the operator
    aliases the two (RAGAGENT_AUTH_PRINCIPAL_ALIASES); an unaliased key of the same name
    sees nothing."""
    files = server_cert(ca, tmp_path)
    alice_cert = client_cert(ca, tmp_path, uri="spiffe://example.org/alice")
    bob_cert = client_cert(ca, tmp_path, uri="spiffe://example.org/bob")
    keys = tmp_path / "keys.jsonl"
    _, alice_key = new_key(keys, "spiffe://example.org/alice", "ask")
    async with running_server(
        tmp_path / "data",
        tls_cert_file=files.cert,
        tls_key_file=files.key,
        tls_client_ca_file=Path(_write_ca(ca, tmp_path)),
        api_keys_file=keys,
        principal_roles={"*": ["ask"]},
        auth_principal_aliases={
            "key:spiffe://example.org/alice": "cert:spiffe://example.org/alice"
        },
    ) as srv:
        async with tls_channel(srv.target, ca, alice_cert) as channel:
            answer = await agent_pb2_grpc.AgentServiceStub(channel).Ask(
                agent_pb2.QuestionRequest(query="What is ragagent?")
            )
        listed = {}
        for name, client, md in (
            ("bob", bob_cert, ()),
            ("bob with alice's key", bob_cert, bearer(alice_key)),
            ("alice", alice_cert, ()),
        ):
            async with tls_channel(srv.target, ca, client) as channel:
                reply = await session_pb2_grpc.SessionServiceStub(channel).ListSessions(
                    session_pb2.ListSessionsRequest(), metadata=md
                )
                listed[name] = [s.session_id for s in reply.sessions]
    assert listed == {
        "bob": [],
        "bob with alice's key": [answer.session_id],
        "alice": [answer.session_id],
    }


def test_a_client_certificate_names_its_uri_san_else_dns_san_else_cn(
    tmp_path: Path, ca: trustme.CA
) -> None:
    def name(**kw: str) -> str:
        return certificate_principal(client_cert(ca, tmp_path, **kw).cert.read_bytes())

    assert name(uri=SPIFFE, dns="x.internal", common_name="cn") == SPIFFE
    assert name(dns="x.internal", common_name="cn") == "x.internal"
    assert name(common_name="cn") == "cn"
    assert certificate_principal(b"not a certificate") == ""


@pytest.mark.parametrize(
    "case",
    [
        "cert without key",
        "client CA without TLS",
        "key of another certificate",
        "missing file",
        "JWKS without issuer",
        "unknown role",
    ],
)
def test_security_settings_that_cannot_work_stop_the_start(
    tmp_path: Path, ca: trustme.CA, case: str
) -> None:
    files = server_cert(ca, tmp_path)
    other = server_cert(trustme.CA(), tmp_path, name="other")
    broken: dict[str, dict[str, object]] = {
        "cert without key": {"tls_cert_file": files.cert},
        "client CA without TLS": {"tls_client_ca_file": files.cert},
        "key of another certificate": {"tls_cert_file": files.cert, "tls_key_file": other.key},
        "missing file": {"tls_cert_file": tmp_path / "no.pem", "tls_key_file": files.key},
        "JWKS without issuer": {"jwt_jwks_file": files.cert},
        "unknown role": {"trusted_principal_header": "x-p", "principal_roles": {"*": ["root"]}},
    }
    with pytest.raises(ConfigurationError):
        Security.from_settings(Settings(**broken[case]))  # type: ignore[arg-type]


def test_the_roles_setting_reads_json_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGAGENT_PRINCIPAL_ROLES", json.dumps({"*": ["ask"]}))
    assert Settings().principal_roles == {"*": ["ask"]}
