"""``ragagent serve`` with RAGAGENT_HTTP_ADDRESS, called as docs/clients.md says: ``curl``
with JSON, and ``buf curl`` with its default protocol (Connect), from a shell."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.processes import REPO, free_port, ingest_documents, server_process
from tests.security.support import client_cert, server_cert

BUF = Path(sys.executable).parent / "buf"
QUESTION = '{"query": "What does URDF describe?"}'

pytestmark = pytest.mark.timeout(300)


def _curl(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    return subprocess.run(
        ["curl", "-sS", "--noproxy", "*", "--max-time", "60", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=90,
    )


def _buf_curl(*args: str) -> subprocess.CompletedProcess[str]:
    if not BUF.exists():
        pytest.skip("buf is not installed in the venv: run `make setup`")
    if not (REPO / ".cache" / "protos" / "buf" / "validate").is_dir():
        pytest.skip(".cache/protos is missing: run `make setup`")
    # --schema: the HTTP listener serves no reflection (a bidirectional stream needs HTTP/2).
    return subprocess.run(
        [str(BUF), "curl", "--schema", str(REPO), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=REPO,
    )


@pytest.mark.slow
def test_curl_and_buf_curl_talk_to_the_same_server(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with server_process(tmp_path, http_address=f"127.0.0.1:{port}") as server:
        ingest_documents(server.target)
        retrieved = _curl(
            "-H",
            "Content-Type: application/json",
            "-d",
            QUESTION,
            f"{base}/ragagent.v1.AgentService/Retrieve",
        )
        refused = _curl(
            "-H",
            "Content-Type: application/json",
            "-d",
            '{"query": ""}',
            "-w",
            "\n%{http_code}",
            f"{base}/ragagent.v1.AgentService/Retrieve",
        )
        streamed = _buf_curl("-d", QUESTION, f"{base}/ragagent.v1.AgentService/AskStream")
        stats = _buf_curl(f"{base}/ragagent.v1.CorpusService/GetCorpusStats")
        log = server.log()
    assert retrieved.returncode == 0, retrieved.stderr
    sources = json.loads(retrieved.stdout)["sources"]
    assert sources[0]["documentId"] == "m1/urdf.md"
    body, _, status = refused.stdout.rpartition("\n")
    assert status == "400"
    assert json.loads(body)["code"] == "invalid_argument"
    assert streamed.returncode == 0, streamed.stderr
    events: list[dict[str, Any]] = _json_objects(streamed.stdout)  # type: ignore[assignment]
    assert "runStarted" in events[0]
    assert any("answerDelta" in event for event in events)
    assert events[-1]["completed"]["status"] == "RESPONSE_STATUS_SUCCESS"
    assert "[1]" in events[-1]["completed"]["answer"]
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["documentCount"] == 4
    # Every call went through the access log, as a gRPC call does.
    assert "/ragagent.v1.AgentService/AskStream" in log


def _json_objects(text: str) -> list[dict[str, object]]:
    """The JSON objects that buf curl prints one after another."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) >= 0:
        value, at = decoder.raw_decode(text, at)
        found.append(value)
    return found


@pytest.mark.slow
def test_curl_over_https_with_mutual_tls_and_a_sighup_rotation(tmp_path: Path) -> None:
    """The server as an operator runs it with TLS and mutual TLS (docs/clients.md's curl
    with --cacert, --cert and --key): the HTTP port speaks HTTPS only, asks for the client
    certificate, and serves the certificate SIGHUP loaded to the next connection."""
    server_ca, next_ca, client_ca = trustme.CA(), trustme.CA(), trustme.CA()
    live = server_cert(server_ca, tmp_path, name="live")
    rotated = server_cert(next_ca, tmp_path, name="rotated")
    me = client_cert(client_ca, tmp_path, uri="spiffe://example.org/reader")
    cas = {}
    for name, ca in (("server", server_ca), ("next", next_ca), ("client", client_ca)):
        cas[name] = tmp_path / f"{name}-ca.pem"
        ca.cert_pem.write_to_path(str(cas[name]))
    port = free_port()
    stats = f"https://127.0.0.1:{port}/ragagent.v1.CorpusService/GetCorpusStats"
    # --fail: a status other than 200 is a non-zero exit too.
    json_body = ("--fail", "-H", "Content-Type: application/json", "-d", "{}")
    with_certificate = ("--cert", str(me.cert), "--key", str(me.key))
    with server_process(
        tmp_path,
        ready=False,  # the plaintext health check cannot reach it
        data_dir=str(tmp_path / "data"),
        http_address=f"127.0.0.1:{port}",
        tls_cert_file=str(live.cert),
        tls_key_file=str(live.key),
        tls_client_ca_file=str(cas["client"]),
        principal_roles=json.dumps({"spiffe://example.org/reader": ["corpus:read"]}),
    ) as server:
        deadline = time.monotonic() + 90
        while (
            reply := _curl("--cacert", str(cas["server"]), *with_certificate, *json_body, stats)
        ).returncode != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        plaintext = _curl(*json_body, stats.replace("https://", "http://"))
        no_certificate = _curl("--cacert", str(cas["server"]), *json_body, stats)

        for source, target in ((rotated.cert, live.cert), (rotated.key, live.key)):
            (temporary := target.with_suffix(".new")).write_bytes(source.read_bytes())
            os.replace(temporary, target)
        rotated_at = time.monotonic()
        server.process.send_signal(signal.SIGHUP)
        while (
            after := _curl("--cacert", str(cas["next"]), *with_certificate, *json_body, stats)
        ).returncode != 0 and time.monotonic() - rotated_at < 10:
            time.sleep(0.05)
        rotation_s = time.monotonic() - rotated_at
        old_ca = _curl("--cacert", str(cas["server"]), *with_certificate, *json_body, stats)
        log = server.log()
    assert reply.returncode == 0, reply.stderr + log[-3000:]
    assert "code" not in json.loads(reply.stdout)  # a GetCorpusStatsResponse, no error
    assert plaintext.returncode != 0  # the TLS port answers no plaintext request
    assert no_certificate.returncode != 0, no_certificate.stdout
    assert after.returncode == 0, after.stderr
    assert "code" not in json.loads(after.stdout)
    assert old_ca.returncode != 0  # the old certificate is no longer served
    print(f"new certificate served over HTTPS {rotation_s * 1000:.0f} ms after SIGHUP")
    assert "tls=mutual" in log or '"tls": "mutual"' in log
