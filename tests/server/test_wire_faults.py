"""Bad bytes and busy ports, against the server as a process.

- Bytes that are not a message of the method are INVALID_ARGUMENT with a clear message and
  one WARNING line without a traceback, on every method (a flood of tracebacks is a cheap
  way to fill an operator's disk).
- The access log has a line for every call the server answers, unknown methods and the
  health and reflection services included.
- A second server on a busy port exits non-zero with one line naming the address, instead
  of "serving" while the kernel splits the traffic between the two.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from ragagent.v1 import agent_pb2, corpus_pb2, session_pb2

from tests.helpers import local_embedder
from tests.processes import REPO, ServerProcess, clean_env, server_process

pytestmark = pytest.mark.slow

METHODS = [
    (f"/{service.full_name}/{method.name}", method.client_streaming)
    for module in (agent_pb2, corpus_pb2, session_pb2)
    for service in module.DESCRIPTOR.services_by_name.values()
    for method in service.methods
]
# An unterminated varint (every byte has its continuation bit set), and a length-delimited
# field 1 that announces more bytes than follow.
GARBAGE = [b"\xff" * 12, b"\x0a\x7fshort"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    local_embedder()  # skips where the model is not provisioned
    data_dir = tmp_path_factory.mktemp("data")
    with server_process(data_dir, log_format="json") as running:
        yield running


def _log_lines(server: ServerProcess) -> list[dict[str, object]]:
    lines = []
    for line in server.log().splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def _send(channel: grpc.Channel, method: str, streaming: bool, payload: bytes) -> grpc.RpcError:
    if streaming:
        with pytest.raises(grpc.RpcError) as caught:
            channel.stream_unary(method)(iter([payload]), timeout=10)
    else:
        with pytest.raises(grpc.RpcError) as caught:
            channel.unary_unary(method)(payload, timeout=10)
    return caught.value


@pytest.mark.parametrize(("method", "streaming"), METHODS, ids=[m for m, _ in METHODS])
def test_undecodable_bytes_are_invalid_argument_logged_once_without_a_traceback(
    server: ServerProcess, method: str, streaming: bool
) -> None:
    before = len(_log_lines(server))
    with grpc.insecure_channel(server.target) as channel:
        for payload in GARBAGE:
            error = _send(channel, method, streaming, payload)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
            assert "not a valid protobuf message" in (error.details() or "")
            status = rpc_status.from_call(error)  # type: ignore[arg-type]
            assert status is not None
            bad_request = error_details_pb2.BadRequest()
            assert any(d.Unpack(bad_request) for d in status.details)
            violation = bad_request.field_violations[0]
            assert violation.reason == "request.undecodable"
            assert violation.field == ("[0]" if streaming else "request")
    new = _log_lines(server)[before:]
    warnings = [line for line in new if line.get("event") == "undecodable request"]
    assert len(warnings) == len(GARBAGE)
    assert all(line["level"] == "warning" for line in warnings)
    assert not [line for line in new if line["level"] == "error"], new
    assert "Traceback" not in server.log()
    assert server.alive()


def test_every_answered_call_has_an_access_log_line(server: ServerProcess) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    before = len(_log_lines(server))
    with grpc.insecure_channel(server.target) as channel:
        with pytest.raises(grpc.RpcError) as unknown:
            channel.unary_unary("/ragagent.v1.AgentService/NoSuchMethod")(b"", timeout=10)
        assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        _send(channel, METHODS[0][0], False, GARBAGE[0])
    access = [line for line in _log_lines(server)[before:] if line.get("event") == "rpc"]
    codes = {(line["method"], line["code"]) for line in access}
    assert ("/ragagent.v1.AgentService/NoSuchMethod", "UNIMPLEMENTED") in codes
    assert (METHODS[0][0], "INVALID_ARGUMENT") in codes
    # Health checks log at DEBUG (probes every few seconds must not flood INFO logs).


def test_a_second_server_on_a_busy_port_exits_with_one_line_naming_the_address(
    server: ServerProcess, tmp_path: Path
) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve"],
        cwd=REPO,
        env=clean_env(data_dir=str(tmp_path), address=server.target),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert second.returncode != 0
    # Log lines and grpc's own bind error may come before it; the error is one line of ours.
    lines = [line for line in second.stderr.splitlines() if line.startswith("ragagent:")]
    assert len(lines) == 1, second.stderr
    assert server.target in lines[0]
    assert "Traceback" not in second.stderr
    assert server.alive()
