"""What the security tests share: certificates made on the spot, key files, signed JWTs, and
one call of every RPC, as an attacker (or a legitimate caller) would make it."""

from __future__ import annotations

import datetime
import ipaddress
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import jwt
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from ragagent.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    corpus_pb2,
    corpus_pb2_grpc,
    session_pb2,
    session_pb2_grpc,
)

from service.security.apikeys import create_key


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path


def server_cert(ca: trustme.CA, folder: Path, name: str = "server") -> CertFiles:
    """A server certificate for localhost and 127.0.0.1, signed by ``ca``, as PEM files."""
    leaf = ca.issue_cert("localhost", "127.0.0.1")
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    for extra in leaf.cert_chain_pems[1:]:
        extra.write_to_path(str(cert), append=True)
    leaf.private_key_pem.write_to_path(str(key))
    return CertFiles(cert, key)


def client_cert(
    ca: trustme.CA,
    folder: Path,
    *,
    uri: str | None = None,
    dns: str | None = None,
    common_name: str = "client",
    valid_for: datetime.timedelta = datetime.timedelta(hours=1),
    units: tuple[str, ...] = (),
    emails: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> CertFiles:
    """A client certificate (URI and/or DNS SAN, else CN only) signed by ``ca``; trustme
    cannot make URI SANs (SPIFFE ids), so it is built here with cryptography."""
    issuer_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), password=None)
    issuer = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    *(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, u) for u in units),
                    x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                ]
            )
        )
        .issuer_name(issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    )
    names: list[x509.GeneralName] = []
    if uri:
        names.append(x509.UniformResourceIdentifier(uri))
    if dns:
        names.append(x509.DNSName(dns))
    names += [x509.RFC822Name(email) for email in emails]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(issuer_key, hashes.SHA256())  # type: ignore[arg-type]
    stem = folder / f"client-{uuid.uuid4().hex[:8]}"
    cert_path, key_path = stem.with_suffix(".pem"), stem.with_suffix(".key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return CertFiles(cert_path, key_path)


def tls_channel(
    target: str, ca: trustme.CA, client: CertFiles | None = None, **kw: Any
) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.cert_pem.bytes(),
        private_key=client.key.read_bytes() if client else None,
        certificate_chain=client.cert.read_bytes() if client else None,
    )
    return grpc.aio.secure_channel(target, credentials, **kw)


def new_key(path: Path, principal: str, *roles: str) -> tuple[str, str]:
    """(key id, key) of a new key in the key file ``path``."""
    record, key = create_key(path, principal, list(roles))
    return record.id, key


def bearer(credential: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {credential}"),)


class Issuer:
    """A token issuer with an RSA key, its JWKS written to ``jwks``."""

    def __init__(self, jwks: Path, *, kid: str = "test-key") -> None:
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        jwks.write_text(json.dumps({"keys": [{**public, "kid": kid, "alg": "RS256"}]}))

    def token(self, *, signer: Any = None, **claims: Any) -> str:
        now = int(datetime.datetime.now(datetime.UTC).timestamp())
        body = {"iss": "https://issuer.test", "aud": "ragagent", "iat": now, "exp": now + 300}
        body.update(claims)
        return jwt.encode(body, signer or self.key, algorithm="RS256", headers={"kid": self.kid})


def reason(error: grpc.aio.AioRpcError) -> str:
    """The ErrorInfo reason of a failed call ("" without one)."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return ""


def retry_delay_s(error: grpc.aio.AioRpcError) -> float | None:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        info = error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            return float(info.retry_delay.ToMilliseconds()) / 1000
    return None


Metadata = tuple[tuple[str, str], ...]
Rpc = Callable[[grpc.aio.Channel, Metadata], Awaitable[object]]


async def _ask_stream(channel: grpc.aio.Channel, md: Metadata) -> object:
    call = agent_pb2_grpc.AgentServiceStub(channel).AskStream(
        agent_pb2.QuestionRequest(query="What is ragagent?"), metadata=md, timeout=30
    )
    return [event async for event in call]


async def _resume_stream(channel: grpc.aio.Channel, md: Metadata) -> object:
    call = agent_pb2_grpc.AgentServiceStub(channel).ResumeStream(
        agent_pb2.ResumeStreamRequest(run_id="run_nobody_was_given_this"), metadata=md, timeout=30
    )
    return [event async for event in call]


async def _ingest(channel: grpc.aio.Channel, md: Metadata) -> object:
    async def nothing() -> Any:
        for _ in ():
            yield corpus_pb2.IngestDocumentsRequest()

    return await corpus_pb2_grpc.CorpusServiceStub(channel).IngestDocuments(
        nothing(), metadata=md, timeout=30
    )


def _agent(channel: grpc.aio.Channel) -> Any:
    return agent_pb2_grpc.AgentServiceStub(channel)


def _corpus(channel: grpc.aio.Channel) -> Any:
    return corpus_pb2_grpc.CorpusServiceStub(channel)


def _sessions(channel: grpc.aio.Channel) -> Any:
    return session_pb2_grpc.SessionServiceStub(channel)


_NO_SESSION = str(uuid.uuid4())

# Every RPC of the contract with a valid request, and the role that should let it through.
EVERY_RPC: dict[str, tuple[str | None, Rpc]] = {
    "Ask": (
        "ask",
        lambda c, md: _agent(c).Ask(agent_pb2.QuestionRequest(query="What is it?"), metadata=md),
    ),
    "AskStream": ("ask", _ask_stream),
    "Retrieve": (
        "ask",
        lambda c, md: _agent(c).Retrieve(agent_pb2.RetrieveRequest(query="it"), metadata=md),
    ),
    # Allowed callers get NOT_FOUND for a run id nobody was given: past the role check.
    "ResumeStream": ("ask", _resume_stream),
    "CancelRun": (
        "ask",
        lambda c, md: _agent(c).CancelRun(
            agent_pb2.CancelRunRequest(run_id="run_nobody_was_given_this"), metadata=md
        ),
    ),
    "IngestDocuments": ("corpus:write", _ingest),
    "DeleteDocument": (
        "corpus:write",
        lambda c, md: _corpus(c).DeleteDocument(
            corpus_pb2.DeleteDocumentRequest(document_id="absent.md"), metadata=md
        ),
    ),
    "ListDocuments": (
        "corpus:read",
        lambda c, md: _corpus(c).ListDocuments(corpus_pb2.ListDocumentsRequest(), metadata=md),
    ),
    "GetCorpusStats": (
        "corpus:read",
        lambda c, md: _corpus(c).GetCorpusStats(corpus_pb2.GetCorpusStatsRequest(), metadata=md),
    ),
    "GetSession": (
        "ask",
        lambda c, md: _sessions(c).GetSession(
            session_pb2.GetSessionRequest(session_id=_NO_SESSION), metadata=md
        ),
    ),
    "ListSessions": (
        "ask",
        lambda c, md: _sessions(c).ListSessions(session_pb2.ListSessionsRequest(), metadata=md),
    ),
    "DeleteSession": (
        "ask",
        lambda c, md: _sessions(c).DeleteSession(
            session_pb2.DeleteSessionRequest(session_id=_NO_SESSION), metadata=md
        ),
    ),
    "Health": (
        None,
        lambda c, md: health_pb2_grpc.HealthStub(c).Check(
            health_pb2.HealthCheckRequest(), metadata=md
        ),
    ),
}


async def outcome(rpc: Rpc, channel: grpc.aio.Channel, md: Metadata) -> str:
    """ "OK", or the status code name and ErrorInfo reason of the failure."""
    try:
        await rpc(channel, md)
    except grpc.aio.AioRpcError as error:
        return f"{error.code().name}/{reason(error)}"
    return "OK"
