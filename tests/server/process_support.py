"""The server and a model server as real processes, for tests of process-level behaviour.

In-process tests share the test's event loop and grpc runtime with the server, so a crash in
grpc's C core, a signal or a port conflict cannot be seen there. These helpers start
``ragagent serve`` (and the endless fake model) the way production starts them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(**settings: str) -> dict[str, str]:
    """The test's environment without its RAGAGENT_ settings, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGAGENT_")}
    env |= {f"RAGAGENT_{k.upper()}": v for k, v in settings.items()}
    env["PYTHONFAULTHANDLER"] = "1"  # a crash leaves its C-level stack in the log
    return env


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None


def wait_serving(target: str, timeout: float = 90.0) -> None:
    """Blocks until the server at ``target`` answers its health check with SERVING."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.Check(
            health_pb2.HealthCheckRequest(),
            timeout=max(1.0, deadline - time.monotonic()),
            wait_for_ready=True,
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


@contextmanager
def server_process(log_dir: Path, **settings: str) -> Iterator[ServerProcess]:
    """``ragagent serve`` on a free loopback port with ``settings`` (RAGAGENT_ names, lower
    case, without the prefix); stopped with SIGTERM at the end, killed if it hangs."""
    port = free_port()
    settings.setdefault("address", f"127.0.0.1:{port}")
    log_path = log_dir / f"server-{port}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve"],
            cwd=REPO,
            env=clean_env(**settings),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    running = ServerProcess(process, port, log_path)
    try:
        wait_serving(running.target)
        yield running
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def model_process(*, deltas: int = 40, interval: float = 0.02) -> Iterator[str]:
    """The endless OpenAI-compatible fake (tests/fakes/model_process.py); yields its base URL."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.model_process",
            f"--deltas={deltas}",
            f"--interval={interval}",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        assert line.startswith("port="), f"the fake model did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split('=', 1)[1])}/v1"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def ingest(data_dir: Path, folder: Path) -> None:
    """Fills the embedded store in ``data_dir`` before a server opens it."""
    subprocess.run(
        [sys.executable, "-m", "service.cli", "ingest", str(folder)],
        cwd=REPO,
        env=clean_env(data_dir=str(data_dir)),
        check=True,
        capture_output=True,
        timeout=300,
    )


async def drain(call: grpc.aio.UnaryStreamCall) -> None:  # type: ignore[type-arg]
    """Reads a stream to its end, for helpers that cancel from outside."""
    async for _ in call:
        await asyncio.sleep(0)
