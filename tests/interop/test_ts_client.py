"""Interop: a TypeScript client (connect-es over gRPC) against the real server.

The client (tests/interop/ts/client.ts) uses only code that `buf generate` writes from the
repository's protos with the documented template (clients/typescript/buf.gen.yaml), with buf,
protoc-gen-es and tsc all from npm (package-lock.json), plus google/rpc/error_details.proto
generated on purpose for the rich errors. So these tests prove the TypeScript story of
docs/clients.md end to end, without Python: generate, type-check with tsc, connect, stream
AskStream, send a request id and a deadline, and decode `google.rpc.BadRequest` / `ErrorInfo`
from grpc-status-details-bin.

Needs `node` and `npm` (skips without them), the fetched third-party protos, and the npm
registry the first time, to run `npm ci` in tests/interop/ts (redone only when
package-lock.json changes).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Running, add_documents, make_chunk, running_server

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TS_DIR = PROJECT_ROOT / "tests" / "interop" / "ts"
BUILD = PROJECT_ROOT / "scripts" / "build-clients.sh"
THIRD_PARTY_PROTOS = PROJECT_ROOT / ".cache" / "protos"

NODE = shutil.which("node")
NPM = shutil.which("npm")

EXIT_OK = 0
EXIT_RPC_ERROR = 3
INVALID_ARGUMENT = 3

BUILD_TIMEOUT_S = 300.0
CLIENT_TIMEOUT_S = 60.0

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None,
    reason="TypeScript interop tests need `node` and `npm` on PATH (not found)",
)

DOCS = [
    make_chunk(
        "module-01/ros2.md",
        "ROS 2 uses DDS as the middleware that carries messages between nodes.",
        module="module-01",
        url="https://book.dev/docs/module-01/ros2",
        title="ROS 2",
    ),
    make_chunk(
        "module-01/urdf.md",
        "A URDF file describes the links and joints of a robot in XML.",
        module="module-01",
        url="https://book.dev/docs/module-01/urdf",
        title="URDF",
    ),
]


@pytest.fixture(scope="session")
def ts_client() -> Path:
    """client.ts generated, type-checked and compiled to dist/client.js (once per session).

    scripts/build-clients.sh does it (as `make clients` does): `npm ci` when
    package-lock.json changed, `buf generate` with clients/typescript/buf.gen.yaml (failing
    if it wrote anything but ragagent/v1), google/rpc/error_details.proto on purpose, `tsc`.
    """
    if not THIRD_PARTY_PROTOS.is_dir():
        pytest.skip(f"third-party protos not fetched into {THIRD_PARTY_PROTOS}: run `make setup`")
    try:
        result = subprocess.run(
            ["bash", str(BUILD), "typescript"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"build-clients.sh typescript took more than {BUILD_TIMEOUT_S:.0f} s: "
            "is the npm registry reachable?"
        )
    assert result.returncode == 0, (
        f"build-clients.sh typescript failed (exit {result.returncode}); `npm ci` needs the "
        f"npm registry and a package-lock.json in sync with package.json:\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    gen = TS_DIR / "gen" / "ts"
    generated = sorted(str(p.relative_to(gen)) for p in gen.rglob("*.ts"))
    assert generated == [
        "google/rpc/error_details_pb.ts",
        "ragagent/v1/agent_pb.ts",
        "ragagent/v1/corpus_pb.ts",
        "ragagent/v1/session_pb.ts",
        "ragagent/v1/types_pb.ts",
    ]
    return TS_DIR / "dist" / "client.js"


@dataclass
class ClientResult:
    returncode: int
    stdout: str
    stderr: str

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def describe(self) -> str:
        return f"exit {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


async def run_client(client: Path, target: str, *args: str) -> ClientResult:
    """Runs the compiled client without blocking the event loop the server serves on."""
    assert NODE is not None
    process = await asyncio.create_subprocess_exec(
        NODE,
        str(client),
        "--address",
        target,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), CLIENT_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"client.js {args} did not finish within {CLIENT_TIMEOUT_S:.0f} s")
    assert process.returncode is not None
    return ClientResult(process.returncode, stdout.decode(), stderr.decode())


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Running]:
    """The real server on port 0 over an embedded store holding DOCS."""
    async with running_server(tmp_path) as srv:
        await add_documents(srv.runtime, DOCS)
        yield srv


async def test_ask_stream_from_typescript(ts_client: Path, server: Running) -> None:
    result = await run_client(
        ts_client,
        server.target,
        "--deadline",
        "30",
        "--request-id",
        "ts-interop-1",
        "ask-stream",
        json.dumps({"query": "Which middleware does ROS 2 rely on?"}),
    )
    assert result.returncode == EXIT_OK, result.describe()
    *lines, metadata = result.lines()
    events = [line["event"] for line in lines]
    assert events, result.describe()
    # proto3 JSON: uint64 as strings, oneof members under their JSON names.
    assert [int(e["sequence"]) for e in events] == list(range(1, len(events) + 1))
    assert events[0]["runStarted"]["requestId"] == "ts-interop-1"
    completed = events[-1]["completed"]
    assert completed["requestId"] == "ts-interop-1"
    assert completed["status"] == "RESPONSE_STATUS_SUCCESS"
    deltas = [e["answerDelta"]["text"] for e in events if "answerDelta" in e]
    assert deltas
    assert all(deltas)
    assert "".join(deltas) == completed["answer"]
    assert "DDS" in completed["answer"]
    assert any(s["documentId"] == "module-01/ros2.md" for s in completed["sources"])
    assert metadata["headers"]["x-request-id"] == "ts-interop-1"
    assert metadata["trailers"]["x-request-id"] == "ts-interop-1"


async def test_bad_request_details_decoded_in_typescript(ts_client: Path, server: Running) -> None:
    result = await run_client(
        ts_client, server.target, "retrieve", json.dumps({"query": "   ", "maxResults": 99})
    )
    assert result.returncode == EXIT_RPC_ERROR, result.describe()
    error = result.lines()[-1]["error"]
    assert error["code"] == INVALID_ARGUMENT
    assert error["codeName"] == "InvalidArgument"
    assert error["requestId"]
    [info] = error["errorInfo"]
    assert info["domain"] == "ragagent.dev"
    assert info["reason"] == "INVALID_ARGUMENT"
    [bad_request] = error["badRequest"]
    fields = sorted(v["field"] for v in bad_request["fieldViolations"])
    assert fields == ["max_results", "query"]
    assert all(v["description"] for v in bad_request["fieldViolations"])


async def test_retrieve_from_typescript(ts_client: Path, server: Running) -> None:
    result = await run_client(
        ts_client,
        server.target,
        "retrieve",
        json.dumps({"query": "What does a URDF file describe?", "maxResults": 1}),
    )
    assert result.returncode == EXIT_OK, result.describe()
    response = result.lines()[0]["response"]
    [source] = response["sources"]
    assert source["documentId"] == "module-01/urdf.md"
    assert 0.0 < source["score"] <= 1.0
    assert response["embeddingModel"]
