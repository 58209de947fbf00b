"""The real server as a child process, for tests and benchmarks that must not share its fate.

A fuzzer or a soak that ran the server in its own process could not tell a crash of the
server from one of its own, nor measure the server's memory and descriptors apart from the
client's; so ``ragagent serve`` runs as a subprocess, configured only through RAGAGENT_*
variables, with its log in a file (a pipe nobody reads would fill up and block it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc

from service.config import default_model_dir

ROOT = Path(__file__).resolve().parents[2]
# A few short documents: enough for answers, sources and citations to exist.
SMALL_CORPUS = {
    "m1/urdf.md": "# URDF\n\nURDF is an XML format that describes a robot. It lists the "
    "links of the robot. Joints connect the links and say how they move.\n",
    "m1/ros2.md": "# ROS 2\n\nROS 2 nodes exchange messages over topics. The middleware "
    "underneath is DDS. Services answer requests; actions report progress.\n",
    "m2/gazebo.md": "# Gazebo\n\nGazebo simulates physics, sensors and robots. A world file "
    "describes the scene; plugins connect it to ROS 2.\n",
    "m4/whisper.md": "# Whisper\n\nWhisper converts speech into text so that a robot can "
    "follow spoken commands. A language model then plans the actions.\n",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def model_provisioned() -> bool:
    return (default_model_dir() / "model.onnx").is_file()


@dataclass
class ServerProcess:
    """A running ``ragagent serve``; ``stop`` ends it and returns its exit code."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def describe_death(self) -> str:
        """Why the server is gone, for an assertion message: exit code or signal, and log."""
        code = self.process.poll()
        if code is None:
            return "the server is running"
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return f"the server died ({how}); its log ends:\n{self.log_tail()}"

    def wait_ready(self, timeout: float = 90.0) -> None:
        with grpc.insecure_channel(self.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + timeout
            while True:
                if not self.alive():
                    raise RuntimeError(self.describe_death())
                try:
                    reply = health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                except grpc.RpcError:
                    reply = None
                if reply is not None and reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the server was not ready in {timeout} s; its log:\n{self.log_tail()}"
                    )
                time.sleep(0.2)

    def stop(self, timeout: float = 30.0) -> int:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


SERVE = ("-m", "service.cli", "serve")


def start_server(
    data_dir: Path, *, command: Sequence[str] = SERVE, **settings: str
) -> ServerProcess:
    """Starts ``ragagent serve`` on a free port over ``data_dir`` and waits until it serves.

    ``command`` is what the interpreter runs: ``ragagent serve`` unless a harness wraps it.
    ``settings`` are RAGAGENT_* variables without the prefix (``agent_strategy="extractive"``);
    nothing else of ours leaks in: no RAGAGENT_* or OPENAI_* variable of the caller, no .env
    (the working directory is ``data_dir``), no model download.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGAGENT_", "OPENAI_"))}
    chosen = {
        "data_dir": str(data_dir),
        "address": f"127.0.0.1:{port}",
        "log_format": "json",
        "log_level": "WARNING",
        **settings,
    }
    env |= {f"RAGAGENT_{k.upper()}": v for k, v in chosen.items()}
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a crash leaves its Python stacks in the log
    # A harness command under tests/ must import from the repository (the cwd is data_dir).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(ROOT)]))
    log_path = data_dir / "server.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, *command],
            env=env,
            cwd=data_dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    server = ServerProcess(process, port, log_path, chosen)
    try:
        server.wait_ready()
    except BaseException:
        server.stop(5)
        raise
    return server


def ingest(target: str, documents: dict[str, str] | None = None) -> None:
    """Ingests ``documents`` (path -> markdown; the small corpus by default) over gRPC."""
    requests = [
        corpus_pb2.IngestDocumentsRequest(document=corpus_pb2.Document(path=p, content=c))
        for p, c in (documents or SMALL_CORPUS).items()
    ]
    with grpc.insecure_channel(target) as channel:
        corpus_pb2_grpc.CorpusServiceStub(channel).IngestDocuments(iter(requests), timeout=120)
