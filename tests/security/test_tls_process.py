"""``ragagent serve`` as a process with mutual TLS and API keys, reached the way operators
and clients reach it: grpcurl, the ``ragagent`` client commands, and a certificate rotated
with SIGHUP while a stream is in flight. The log never holds a credential."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc

from service.ingest.loader import SourceDocument
from service.ingest.remote import ingest_remote
from service.security.apikeys import split_key
from tests.processes import REPO, clean_env, server_process
from tests.security.support import CertFiles, bearer, client_cert, new_key, server_cert

pytestmark = pytest.mark.slow

CI = "spiffe://example.org/ns/ci/sa/reader"
DOC = "# Rotation\n\nCertificates rotate without a restart.\n"


def _replace(source: Path, target: Path) -> None:
    """Replaces ``target`` whole (as cert-manager and friends do), never half-written."""
    temporary = target.with_suffix(".new")
    shutil.copyfile(source, temporary)
    os.replace(temporary, target)


def _channel(port: int, ca: trustme.CA, client: CertFiles) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.cert_pem.bytes(),
        private_key=client.key.read_bytes(),
        certificate_chain=client.cert.read_bytes(),
    )
    return grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials)


async def _health(port: int, ca: trustme.CA, client: CertFiles, wait_s: float = 5) -> str:
    async with _channel(port, ca, client) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=wait_s, wait_for_ready=wait_s > 5
            )
        except grpc.aio.AioRpcError as error:
            return error.code().name
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def _run(*command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )


async def test_mutual_tls_rotation_grpcurl_and_the_client_commands(tmp_path: Path) -> None:
    server_ca, next_ca, client_ca = trustme.CA(), trustme.CA(), trustme.CA()
    current = server_cert(server_ca, tmp_path, name="current")
    rotated = server_cert(next_ca, tmp_path, name="rotated")
    live = CertFiles(tmp_path / "live.pem", tmp_path / "live.key")
    shutil.copyfile(current.cert, live.cert)
    shutil.copyfile(current.key, live.key)
    client_ca_file = tmp_path / "client-ca.pem"
    client_ca.cert_pem.write_to_path(str(client_ca_file))
    ci = client_cert(client_ca, tmp_path, uri=CI)
    keys = tmp_path / "keys.jsonl"
    _, key = new_key(keys, "ingester", "corpus:write", "ask")
    ca_files = {}
    for name, ca in (("server", server_ca), ("next", next_ca)):
        ca_files[name] = tmp_path / f"{name}-ca.pem"
        ca.cert_pem.write_to_path(str(ca_files[name]))

    with server_process(
        tmp_path,
        ready=False,  # the plaintext health check cannot reach it
        log_format="json",
        data_dir=str(tmp_path / "data"),
        tls_cert_file=str(live.cert),
        tls_key_file=str(live.key),
        tls_client_ca_file=str(client_ca_file),
        api_keys_file=str(keys),
        principal_roles=json.dumps({CI: ["corpus:read"]}),
    ) as server:
        port = server.port
        assert await _health(port, server_ca, ci, wait_s=90) == "SERVING", server.log()

        # A client stream in flight on the current certificate's connection.
        async with _channel(port, server_ca, ci) as channel:
            stub = corpus_pb2_grpc.CorpusServiceStub(channel)
            go_on = asyncio.Event()

            async def documents() -> Any:
                yield corpus_pb2.IngestDocumentsRequest(
                    document=corpus_pb2.Document(path="a.md", content=DOC)
                )
                await go_on.wait()
                yield corpus_pb2.IngestDocumentsRequest(
                    document=corpus_pb2.Document(path="b.md", content=DOC + "Twice.\n")
                )

            in_flight = stub.IngestDocuments(documents(), metadata=bearer(key), timeout=120)
            await asyncio.sleep(0.5)

            _replace(rotated.cert, live.cert)
            _replace(rotated.key, live.key)
            rotated_at = time.monotonic()
            server.process.send_signal(signal.SIGHUP)
            new_ca_works = ""
            while time.monotonic() - rotated_at < 10:
                new_ca_works = await _health(port, next_ca, ci)
                if new_ca_works == "SERVING":
                    break
                await asyncio.sleep(0.05)
            rotation_s = time.monotonic() - rotated_at
            old_ca_refused = await _health(port, server_ca, ci)

            # A broken certificate on the next SIGHUP is refused; the rotated one serves on.
            live.cert.write_text("-----BEGIN CERTIFICATE-----\nbroken\n")
            server.process.send_signal(signal.SIGHUP)
            await asyncio.sleep(0.5)
            after_broken = await _health(port, next_ca, ci)

            go_on.set()
            ingested = await in_flight
            # The connection opened before the rotation carries new calls too.
            stats = await stub.GetCorpusStats(
                corpus_pb2.GetCorpusStatsRequest(), metadata=bearer(key)
            )
            # A refused upload reports the refusal, not a write that lost the race with it.
            refused = []
            for _ in range(10):
                try:
                    await ingest_remote(
                        channel, iter([SourceDocument(path="x.md", content=DOC)] * 3)
                    )
                except grpc.aio.AioRpcError as error:
                    refused.append(error.code().name)

        grpcurl = str(REPO / ".venv" / "bin" / "grpcurl")
        tls = ["-cacert", str(ca_files["next"]), "-cert", str(ci.cert), "-key", str(ci.key)]
        target = f"127.0.0.1:{port}"
        listed = _run(grpcurl, *tls, target, "list")
        stats_by_key = _run(
            grpcurl,
            *tls,
            "-H",
            f"authorization: Bearer {key}",
            target,
            "ragagent.v1.CorpusService/GetCorpusStats",
        )
        stats_by_certificate = _run(
            grpcurl, *tls, target, "ragagent.v1.CorpusService/GetCorpusStats"
        )
        sessions_by_certificate = _run(
            grpcurl, *tls, target, "ragagent.v1.SessionService/ListSessions"
        )
        plaintext = _run(grpcurl, "-plaintext", target, "list")

        cli_tls = ["--tls-ca", str(ca_files["next"]), "--tls-cert", str(ci.cert)]
        cli_tls += ["--tls-key", str(ci.key), "--address", target]
        ragagent = [sys.executable, "-m", "service.cli"]
        health_cli = _run(*ragagent, "health", *cli_tls, env=clean_env())
        ask_cli = _run(
            *ragagent,
            "ask",
            "How do certificates rotate?",
            *cli_tls,
            env=clean_env() | {"RAGAGENT_API_KEY": key},
        )
        ask_without_key = _run(*ragagent, "ask", "How?", *cli_tls, env=clean_env())
        pages = tmp_path / "pages"
        pages.mkdir()
        (pages / "c.md").write_text("# Keys\n\nKeys rotate without a restart.\n")
        ingest_cli = _run(
            *ragagent,
            "ingest",
            str(pages),
            "--json",
            *cli_tls,
            env=clean_env() | {"RAGAGENT_API_KEY": key},
        )
        ingest_as_reader = _run(
            *ragagent, "ingest", str(pages), "--prune", *cli_tls, env=clean_env()
        )

    log = server.log()
    assert new_ca_works == "SERVING", log
    assert rotation_s < 2.0
    print(f"new certificate served {rotation_s * 1000:.0f} ms after SIGHUP")
    assert old_ca_refused == "UNAVAILABLE"
    assert after_broken == "SERVING"
    assert "TLS certificate not reloaded" in log
    assert ingested.documents_added == 2
    assert stats.document_count == 2
    assert refused == ["PERMISSION_DENIED"] * 10

    assert listed.returncode == 0, listed.stderr
    assert "ragagent.v1.AgentService" in listed.stdout
    assert stats_by_key.returncode == 0, stats_by_key.stderr
    assert json.loads(stats_by_key.stdout).get("document_count") == 2, stats_by_key.stdout
    assert stats_by_certificate.returncode == 0, stats_by_certificate.stderr
    assert sessions_by_certificate.returncode != 0
    assert "PermissionDenied" in sessions_by_certificate.stderr
    assert plaintext.returncode != 0

    assert health_cli.returncode == 0, health_cli.stderr
    assert health_cli.stdout.strip() == "SERVING"
    assert ask_cli.returncode == 0, ask_cli.stderr
    assert ask_without_key.returncode == 1
    assert "PERMISSION_DENIED" in ask_without_key.stderr
    assert ingest_cli.returncode == 0, ingest_cli.stderr
    assert json.loads(ingest_cli.stdout)["added"] == 1
    # The certificate alone (corpus:read) may not prune the corpus.
    assert ingest_as_reader.returncode == 1
    assert "PERMISSION_DENIED" in ingest_as_reader.stderr

    # The access log names the principal and the key's id, never the key.
    # The key is rak_<id>_<secret>, and the secret (URL-safe base64) may itself hold "_".
    parts = split_key(key)
    assert parts is not None
    secret = parts[1]
    assert secret not in log
    assert key not in log
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    calls = [line for line in lines if line.get("event") == "rpc"]
    assert {"ingester", CI} <= {line.get("principal") for line in calls}
