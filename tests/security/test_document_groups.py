"""Where a caller's groups come from: the JWT claim, the API key's record, the trusted mesh
header (only for principals that header names) and RAGAGENT_PRINCIPAL_GROUPS, a certificate's
OUs; each decides which documents Retrieve returns, over the real server."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from ragagent.v1 import agent_pb2, agent_pb2_grpc, corpus_pb2, corpus_pb2_grpc

from service.security.apikeys import KeyRing, create_key
from service.security.groups import certificate_ou_groups, header_groups, parse_groups
from tests.helpers import running_server
from tests.security.support import Issuer, bearer, new_key

ISSUER = "https://issuer.test"
HEADER, GROUPS_HEADER = "x-forwarded-principal", "x-forwarded-groups"
PAGES = {
    group: f"---\naccess: {{groups: [{group}]}}\n---\n\n# {group} plan\n\nThe {group} plan for "
    "the year: budget, people and the robots we build.\n"
    for group in ("robotics", "finance", "ops")
}


def test_group_names_are_parsed_like_roles_and_odd_ones_are_dropped() -> None:
    assert parse_groups(["a", " b ", "", 5, "c\x00"]) == {"a", "b"}
    assert parse_groups("a, b c") == {"a", "b", "c"}
    assert parse_groups({"not": "a list"}) == frozenset()
    assert header_groups("Domain Users, ops") == {"Domain Users", "ops"}
    assert header_groups(None) == frozenset()


def test_an_api_keys_groups_are_in_its_record(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    _, key = create_key(keys, "alice", ["ask"], ["robotics", "robotics", "ops"])
    with pytest.raises(ValueError, match="group"):
        create_key(keys, "bob", ["ask"], ["bad\x07name"])
    ring = KeyRing(keys)
    ring.refresh()
    principal = ring.verify(key)
    assert principal is not None
    assert principal.groups == {"robotics", "ops"}
    old = new_key(keys, "carol", "ask")[1]  # no --group: no groups (and older files alike)
    ring.refresh()
    verified = ring.verify(old)
    assert verified is not None
    assert verified.groups == frozenset()


def test_a_certificates_ou_values_are_its_groups() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "bot"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "robotics"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    from cryptography.hazmat.primitives import serialization

    pem = cert.public_bytes(serialization.Encoding.PEM)
    assert certificate_ou_groups(pem) == {"robotics", "ops"}
    assert certificate_ou_groups(b"not a certificate") == frozenset()


async def _readable(channel: object, metadata: tuple[tuple[str, str], ...]) -> set[str]:
    found = await agent_pb2_grpc.AgentServiceStub(channel).Retrieve(  # type: ignore[arg-type]
        agent_pb2.RetrieveRequest(query="the plan for the year", max_results=10,
                                  confidence_threshold=0.0),
        metadata=metadata,
    )  # fmt: skip
    return {s.document_id.removesuffix(".md") for s in found.sources}


async def _pages(admin: str, channel: object) -> AsyncIterator[corpus_pb2.IngestDocumentsRequest]:
    for group, content in PAGES.items():
        yield corpus_pb2.IngestDocumentsRequest(
            document=corpus_pb2.Document(path=f"{group}.md", content=content)
        )


async def test_each_credential_kind_reads_what_its_groups_are_granted(tmp_path: Path) -> None:
    keys, jwks = tmp_path / "keys.jsonl", tmp_path / "jwks.json"
    issuer = Issuer(jwks)
    admin = new_key(keys, "root", "admin")[1]
    alice = create_key(keys, "alice", ["ask"], ["robotics"])[1]
    async with running_server(
        tmp_path / "data",
        api_keys_file=keys,
        jwt_jwks_file=jwks,
        jwt_issuer=ISSUER,
        jwt_audience="ragagent",
        trusted_principal_header=HEADER,
        trusted_groups_header=GROUPS_HEADER,
        principal_roles={"*": ["ask"]},
        principal_groups={"mesh-finance": ["finance"]},
    ) as srv:
        await corpus_pb2_grpc.CorpusServiceStub(srv.channel).IngestDocuments(
            _pages(admin, srv.channel), metadata=bearer(admin), timeout=60
        )
        jwt_finance = issuer.token(sub="jay", roles=["ask"], groups=["finance"])
        jwt_string = issuer.token(sub="kim", roles=["ask"], groups="ops robotics")
        seen = {
            "jwt finance": await _readable(srv.channel, bearer(jwt_finance)),
            "jwt as string": await _readable(srv.channel, bearer(jwt_string)),
            "key robotics": await _readable(srv.channel, bearer(alice)),
            # A caller with its own credential cannot add groups by sending the header.
            "key + header": await _readable(
                srv.channel, (*bearer(alice), (GROUPS_HEADER, "finance,ops"))
            ),
            "mesh header": await _readable(srv.channel, ((HEADER, "svc"), (GROUPS_HEADER, "ops"))),
            "mesh mapped": await _readable(srv.channel, ((HEADER, "mesh-finance"),)),
            "mesh nothing": await _readable(srv.channel, ((HEADER, "svc"),)),
            "admin": await _readable(srv.channel, bearer(admin)),
        }
    assert seen == {
        "jwt finance": {"finance"},
        "jwt as string": {"ops", "robotics"},
        "key robotics": {"robotics"},
        "key + header": {"robotics"},
        "mesh header": {"ops"},
        "mesh mapped": {"finance"},
        "mesh nothing": set(),
        "admin": {"robotics", "finance", "ops"},
    }
