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
from pathlib import Path

import pytest

from tests.helpers import Running
from tests.interop import support
from tests.interop.support import (
    EXIT_OK,
    NODE,
    NPM,
    ClientResult,
    check_ask_stream,
    check_bad_request,
)

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None,
    reason="TypeScript interop tests need `node` and `npm` on PATH (not found)",
)


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
