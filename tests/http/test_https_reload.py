"""Certificates of the HTTPS listener change without a restart, as gRPC's do: the reload
that SIGHUP runs serves new connections the new certificate and client CAs, open
connections keep theirs, and a stream whose client certificate is no longer trusted ends
UNAUTHENTICATED (issue 26, item 3, over HTTP)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import httpx
import trustme

from tests.fakes.openai_script import ChatReply
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import BOOKLET, Running, running_server
from tests.http.support import client_ca_file, envelope, https_client, messages
from tests.security.support import CertFiles, client_cert, server_cert

HEALTH = "/grpc.health.v1.Health/Check"
# The bound issue 26 sets for the gRPC streams.
ENDS_WITHIN_S = 2.0


def _replace(path: Path, content: bytes) -> None:
    """As an operator's tooling does: a new file moved over the old one."""
    temporary = path.with_suffix(".new")
    temporary.write_bytes(content)
    os.replace(temporary, path)


async def _health(srv: Running, trusted: trustme.CA, client: CertFiles) -> str:
    try:
        async with https_client(srv, trusted, client) as http:
            reply = await http.post(HEALTH, json={})
    except httpx.TransportError:
        return "refused"
    return str(reply.json().get("status", reply.json().get("code")))


async def test_a_reload_gives_new_https_connections_the_new_certificate_and_client_cas(
    tmp_path: Path,
) -> None:
    old_server_ca, new_server_ca = trustme.CA(), trustme.CA()
    old_client_ca, new_client_ca = trustme.CA(), trustme.CA()
    files = server_cert(old_server_ca, tmp_path)
    old_client = client_cert(old_client_ca, tmp_path, uri="spiffe://example.org/old")
    new_client = client_cert(new_client_ca, tmp_path, uri="spiffe://example.org/new")
    client_cas = client_ca_file(tmp_path, old_client_ca)
    async with running_server(
        tmp_path / "data",
        http_address="127.0.0.1:0",
        tls_cert_file=files.cert,
        tls_key_file=files.key,
        tls_client_ca_file=client_cas,
    ) as srv:
        before = await _health(srv, old_server_ca, old_client)
        async with https_client(srv, old_server_ca, old_client) as kept:
            assert (await kept.post(HEALTH, json={})).status_code == 200

            rotated = server_cert(new_server_ca, tmp_path, name="rotated")
            _replace(files.cert, rotated.cert.read_bytes())
            _replace(files.key, rotated.key.read_bytes())
            _replace(client_cas, new_client_ca.cert_pem.bytes())
            reloaded = await srv.server.reload_certificates()

            after = {
                "new server CA, new client": await _health(srv, new_server_ca, new_client),
                "old server CA": await _health(srv, old_server_ca, new_client),
                "old client CA": await _health(srv, new_server_ca, old_client),
            }
            # Trusting only the old server CA, it can only be on the connection it had.
            kept_after = (await kept.post(HEALTH, json={})).json()["status"]

            _replace(files.cert, b"not a certificate")
            broken_refused = not await srv.server.reload_certificates()
            after_broken = await _health(srv, new_server_ca, new_client)
    assert before == "SERVING"
    assert reloaded
    assert after == {
        "new server CA, new client": "SERVING",
        "old server CA": "refused",
        "old client CA": "refused",
    }
    assert kept_after == "SERVING"
    assert broken_refused
    assert after_broken == "SERVING"


class Question:
    """An AskStream over HTTPS; records its messages, how it ended and when."""

    def __init__(self, srv: Running, ca: trustme.CA, client: CertFiles) -> None:
        self.events: list[dict[str, Any]] = []
        self.answering = asyncio.Event()
        self.ended_at = 0.0
        self.task = asyncio.create_task(self._run(srv, ca, client))

    async def _run(self, srv: Running, ca: trustme.CA, client: CertFiles) -> None:
        async with (
            https_client(srv, ca, client) as http,
            http.stream(
                "POST",
                "/ragagent.v1.AgentService/AskStream",
                content=envelope({"query": "What does URDF describe?"}),
                headers={"content-type": "application/connect+json"},
            ) as reply,
        ):
            async for event in messages(reply):
                self.events.append(event)
                if "answerDelta" in event:
                    self.answering.set()
        self.ended_at = time.monotonic()

    @property
    def error(self) -> str:
        """The end-of-stream message's error code; empty when the stream completed."""
        end = self.events[-1] if self.events else {"sequence": 0}
        if "sequence" in end:  # an answer's event: the stream was cut, not ended
            return "no end-of-stream message"
        return str(end.get("error", {}).get("code", ""))


async def test_removing_a_client_ca_ends_the_https_streams_of_its_certificates(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    server_ca, removed_ca, kept_ca = trustme.CA(), trustme.CA(), trustme.CA()
    files = server_cert(server_ca, tmp_path)
    alice = client_cert(removed_ca, tmp_path, uri="spiffe://example.org/alice")
    bob = client_cert(kept_ca, tmp_path, uri="spiffe://example.org/bob")
    client_cas = client_ca_file(tmp_path, removed_ca, kept_ca)
    # Slow answers: 40 pieces 0.1 s apart, both still streaming when the CA goes.
    fake_llm.script_chat(
        *(ChatReply.text("URDF " * 40, pieces=40, delta_interval=0.1) for _ in range(2))
    )
    async with running_server(
        tmp_path / "data",
        documents=BOOKLET,
        http_address="127.0.0.1:0",
        tls_cert_file=files.cert,
        tls_key_file=files.key,
        tls_client_ca_file=client_cas,
        principal_roles={"*": ["ask"]},
        access_unlabelled="public",
        llm_base_url=fake_llm.base_url,
        agent_strategy="retrieve_first",
    ) as srv:
        questions = {name: Question(srv, server_ca, c) for name, c in (("a", alice), ("b", bob))}
        for question in questions.values():
            await asyncio.wait_for(question.answering.wait(), 30)
        _replace(client_cas, kept_ca.cert_pem.bytes())
        removed_at = time.monotonic()
        assert await srv.server.reload_certificates()
        await asyncio.wait_for(questions["a"].task, ENDS_WITHIN_S + 5)
        alice_took = questions["a"].ended_at - removed_at
        await asyncio.wait_for(questions["b"].task, 30)
    alice_deltas = sum("answerDelta" in event for event in questions["a"].events)
    bob_kinds = [next(k for k in e if k != "sequence") for e in questions["b"].events[:-1]]
    assert questions["a"].error == "unauthenticated", questions["a"].events[-1]
    assert "no longer trusted" in questions["a"].events[-1]["error"]["message"]
    assert alice_took <= ENDS_WITHIN_S, f"alice's stream ended {alice_took:.2f} s after reload"
    print(f"HTTPS stream ended {alice_took:.2f} s after the CA was removed")
    assert alice_deltas < 40
    assert questions["b"].error == ""
    assert bob_kinds[-1] == "completed"
