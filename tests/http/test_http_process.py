"""``ragagent serve`` with RAGAGENT_HTTP_ADDRESS, called as docs/clients.md says: ``curl``
with JSON, and ``buf curl`` with its default protocol (Connect), from a shell."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.processes import REPO, free_port, ingest_documents, server_process

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
