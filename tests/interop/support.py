"""What the interop tests share: the paths, the clients' exit codes, running a client."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import make_chunk

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INTEROP_DIR = PROJECT_ROOT / "tests" / "interop"
BUILD = PROJECT_ROOT / "scripts" / "build-clients.sh"
THIRD_PARTY_PROTOS = PROJECT_ROOT / ".cache" / "protos"

NODE = shutil.which("node")
NPM = shutil.which("npm")
NODE_CLIENT = INTEROP_DIR / "client.mjs"
# The TypeScript example client, built by scripts/build-clients.sh (conftest.ts_client).
TS_DIR = INTEROP_DIR / "ts"

# Exit codes of every client.
EXIT_OK = 0
EXIT_RPC_ERROR = 3
EXIT_TOOLCHAIN = 4  # build-clients.sh: a language's toolchain is not installed
# gRPC status codes.
INVALID_ARGUMENT = 3
UNIMPLEMENTED = 12
UNAVAILABLE = 14
PERMISSION_DENIED = 7
UNAUTHENTICATED = 16

BUILD_TIMEOUT_S = 300.0
CLIENT_TIMEOUT_S = 60.0

# What the server holds (the ``documents`` fixture of conftest.py).
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


@dataclass
class ClientResult:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def lines(self) -> list[Any]:
        """One JSON value a line of stdout."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def describe(self) -> str:
        return f"exit {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


async def run_client(
    command: Sequence[str], target: str, *args: str, env: Mapping[str, str] | None = None
) -> ClientResult:
    """Runs ``command --address target args`` without blocking the event loop the
    in-process server serves on; fails the test after CLIENT_TIMEOUT_S."""
    process = await asyncio.create_subprocess_exec(
        *command,
        "--address",
        target,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), CLIENT_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"{' '.join([*command, *args])} did not finish within {CLIENT_TIMEOUT_S:.0f} s")
    assert process.returncode is not None
    return ClientResult(process.returncode, stdout.decode(), stderr.decode())


async def run_node_client(
    client: Path,
    target: str,
    command: str,
    request: Mapping[str, Any] | None = None,
    *,
    options: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ClientResult:
    """client.mjs ``options`` ``command`` with ``request`` as JSON, a 30 s deadline and no
    colours, in this process's environment updated with ``env``."""
    assert NODE is not None
    args = ["--deadline", "30", *options, command]
    if request is not None:
        args.append(json.dumps(request))
    return await run_client(
        [NODE, str(client)], target, *args, env={**os.environ, "NO_COLOR": "1", **(env or {})}
    )


def check_ask_stream(result: ClientResult, request_id: str) -> dict[str, Any]:
    """What a generated client printed for AskStream (proto3 JSON: one event a line, then the
    headers and trailers): a successful run numbered from 1 whose deltas make up the answer,
    ``request_id`` in run_started and in both metadata. Returns the completed event."""
    assert result.returncode == EXIT_OK, result.describe()
    *lines, metadata = result.lines()
    events = [line["event"] for line in lines]
    assert events, result.describe()
    assert [int(e["sequence"]) for e in events] == list(range(1, len(events) + 1))
    assert events[0]["runStarted"]["requestId"] == request_id
    completed: dict[str, Any] = events[-1]["completed"]
    assert completed["status"] == "RESPONSE_STATUS_SUCCESS"
    deltas = [e["answerDelta"]["text"] for e in events if "answerDelta" in e]
    assert deltas
    assert all(deltas)
    assert "".join(deltas) == completed["answer"]
    assert metadata["headers"]["x-request-id"] == request_id
    assert metadata["trailers"]["x-request-id"] == request_id
    return completed


def check_bad_request(result: ClientResult, fields: list[str]) -> dict[str, Any]:
    """A client's INVALID_ARGUMENT with ragagent's ErrorInfo and a BadRequest naming
    ``fields``, each violation described. Returns the error the client printed."""
    assert result.returncode == EXIT_RPC_ERROR, result.describe()
    error: dict[str, Any] = result.lines()[-1]["error"]
    assert error["code"] == INVALID_ARGUMENT
    [info] = error["errorInfo"]
    assert info["domain"] == "ragagent.dev"
    assert info["reason"] == "INVALID_ARGUMENT"
    [bad_request] = error["badRequest"]
    violations = bad_request["fieldViolations"]
    assert sorted(v["field"] for v in violations) == fields
    assert all(v["description"] for v in violations)
    return error
