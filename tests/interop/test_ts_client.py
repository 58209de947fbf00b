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

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers import Running
from tests.interop import support
from tests.interop.support import (
    BUILD,
    BUILD_TIMEOUT_S,
    EXIT_OK,
    INTEROP_DIR,
    NODE,
    NPM,
    PROJECT_ROOT,
    THIRD_PARTY_PROTOS,
    ClientResult,
    check_ask_stream,
    check_bad_request,
)

TS_DIR = INTEROP_DIR / "ts"

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None,
    reason="TypeScript interop tests need `node` and `npm` on PATH (not found)",
)


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


async def run_client(client: Path, target: str, *args: str) -> ClientResult:
    assert NODE is not None
    return await support.run_client([NODE, str(client)], target, *args)


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
    completed = check_ask_stream(result, "ts-interop-1")
    assert completed["requestId"] == "ts-interop-1"
    assert "DDS" in completed["answer"]
    assert any(s["documentId"] == "module-01/ros2.md" for s in completed["sources"])


async def test_bad_request_details_decoded_in_typescript(ts_client: Path, server: Running) -> None:
    result = await run_client(
        ts_client, server.target, "retrieve", json.dumps({"query": "   ", "maxResults": 99})
    )
    error = check_bad_request(result, ["max_results", "query"])
    assert error["codeName"] == "InvalidArgument"
    assert error["requestId"]


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
