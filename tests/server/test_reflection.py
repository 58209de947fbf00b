"""Debugging with standard tools and no proto files: grpcurl and buf curl over reflection."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import add_documents, make_chunk, running_server

BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (make setup installs it)")
    return path


async def _run(*argv: str) -> tuple[int, str, str]:
    # A subprocess driven asynchronously, so the in-process server keeps serving meanwhile.
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_grpcurl_lists_describes_and_calls_without_proto_files(tmp_path: Path) -> None:
    grpcurl = _tool("grpcurl")
    async with running_server(tmp_path) as srv:
        await add_documents(srv.runtime, [make_chunk("a.md", "Gazebo simulates robot physics.")])
        code, listing, err = await _run(grpcurl, "-plaintext", srv.target, "list")
        assert code == 0, err
        assert {"ragagent.v1.AgentService", "grpc.health.v1.Health"} <= set(listing.split())

        code, described, err = await _run(
            grpcurl, "-plaintext", srv.target, "describe", "ragagent.v1.QuestionRequest"
        )
        assert code == 0, err
        assert "confidence_threshold" in described

        code, out, err = await _run(
            grpcurl,
            "-plaintext",
            "-d",
            json.dumps({"query": "What simulates physics?", "confidence_threshold": 0}),
            srv.target,
            "ragagent.v1.AgentService/Retrieve",
        )
        assert code == 0, err
        first = json.loads(out)["sources"][0]
        assert first.get("documentId", first.get("document_id")) == "a.md"

        code, out, err = await _run(
            grpcurl,
            "-plaintext",
            "-d",
            '{"query": ""}',
            srv.target,
            "ragagent.v1.AgentService/Retrieve",
        )
        assert code != 0
        assert "InvalidArgument" in err or "InvalidArgument" in out
        assert "google.rpc.BadRequest" in err + out


async def test_buf_curl_calls_through_reflection(tmp_path: Path) -> None:
    buf = _tool("buf")
    async with running_server(tmp_path) as srv:
        code, out, err = await _run(
            buf,
            "curl",
            "--http2-prior-knowledge",
            "--protocol",
            "grpc",
            "--data",
            '{"service": "ragagent.v1.AgentService"}',
            f"http://{srv.target}/grpc.health.v1.Health/Check",
        )
    assert code == 0, err
    assert json.loads(out)["status"] == "SERVING"
