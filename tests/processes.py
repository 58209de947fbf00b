"""``ragagent`` and the fake model as processes of their own, for tests and benchmarks.

In-process tests share the test's event loop and grpc runtime with the server, so a crash in
grpc's C core, a signal, a port conflict or the server's own memory and descriptors cannot be
seen there. Here ``ragagent serve`` runs as production runs it: a subprocess configured only
through RAGAGENT_* variables, on a free loopback port, with its log in a file (a pipe nobody
reads would fill up and block it).

- ``clean_env``: the caller's environment without RAGAGENT_*/OPENAI_* variables, plus settings;
- ``ServerProcess`` / ``start_server`` / ``server_process``: ``ragagent serve`` (or a harness
  wrapping it), SERVING or failing with the reason it died, stopped with SIGTERM (then kill);
- ``model_process``: the endless OpenAI-compatible fake (tests/fakes/model_process.py);
- ``ingest_folder`` (the CLI, before a server opens the store), ``ingest_documents`` (gRPC);
- ``Ragagent``: any ``ragagent`` command with its JSON log lines watched as they come.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc

REPO = Path(__file__).resolve().parents[1]
SERVE = ("-m", "service.cli", "serve")
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


def clean_env(*, code: Sequence[Path] = (), **settings: str) -> dict[str, str]:
    """The caller's environment without its RAGAGENT_* and OPENAI_* variables, plus
    ``settings`` (RAGAGENT_ names, lower case, without the prefix: ``log_format="json"``).
    ``code``: folders imported from before this repository (another revision's service, for
    a benchmark that compares the two).

    No model download (HF_HUB_OFFLINE), a crash leaves its stacks in the log
    (PYTHONFAULTHANDLER), and ``-m service.cli`` or ``-m tests...`` import from this
    repository whatever the working directory (PYTHONPATH).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGAGENT_", "OPENAI_"))}
    env |= {f"RAGAGENT_{k.upper()}": v for k, v in settings.items()}
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"
    first = [str(folder) for folder in code]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*first, env.get("PYTHONPATH"), str(REPO)]))
    return env


@dataclass
class ServerProcess:
    """A ``ragagent serve`` process; ``stop`` ends it and returns its exit code."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    settings: dict[str, str] = field(default_factory=dict)

    @classmethod
    def launch(
        cls,
        folder: Path,
        *,
        command: Sequence[str] = SERVE,
        code: Sequence[Path] = (),
        **settings: str,
    ) -> ServerProcess:
        """Starts ``command`` (``ragagent serve`` unless a harness wraps it) on a free port,
        without waiting. ``folder`` is its working directory (so no .env of ours is read),
        holds its log (server.log) and is its data dir unless ``settings`` say otherwise."""
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        chosen = {"data_dir": str(folder), "address": f"127.0.0.1:{port}", **settings}
        log_path = folder / "server.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, *command],
                env=clean_env(code=code, **chosen),
                cwd=folder,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        return cls(process, port, log_path, chosen)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def describe_death(self) -> str:
        """Why the server is gone, for an assertion message: exit code or signal, and log."""
        code = self.process.poll()
        if code is None:
            return "the server is running"
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return f"the server died ({how}); its log ends:\n{self.log_tail()}"

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until the health check answers SERVING; fails at once, saying why, if it dies."""
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
        """SIGTERM, then SIGKILL if it has not exited after ``timeout`` s."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


def start_server(
    folder: Path, *, command: Sequence[str] = SERVE, code: Sequence[Path] = (), **settings: str
) -> ServerProcess:
    """``ServerProcess.launch`` and wait until it serves (stopped again if it never does)."""
    server = ServerProcess.launch(folder, command=command, code=code, **settings)
    try:
        server.wait_ready()
    except BaseException:
        server.stop(5)
        raise
    return server


@contextmanager
def server_process(folder: Path, *, ready: bool = True, **settings: str) -> Iterator[ServerProcess]:
    """``ragagent serve`` for a ``with`` block: serving (unless ``ready`` is False, for a
    server the plaintext health check cannot reach), stopped at the end."""
    server = start_server(folder, **settings) if ready else ServerProcess.launch(folder, **settings)
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class ModelProcess:
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@contextmanager
def model_process(*, deltas: int = 40, interval: float = 0.02) -> Iterator[ModelProcess]:
    """The endless OpenAI-compatible fake (tests/fakes/model_process.py) as a process."""
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
        yield ModelProcess(int(line.split("=", 1)[1]))
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def ingest_folder(data_dir: Path, folder: Path, *, timeout: float = 300.0) -> None:
    """``ragagent ingest folder`` into the embedded store in ``data_dir``, before a server
    opens it (the embedded store is single-process)."""
    subprocess.run(
        [sys.executable, "-m", "service.cli", "ingest", str(folder)],
        cwd=REPO,
        env=clean_env(data_dir=str(data_dir)),
        check=True,
        capture_output=True,
        timeout=timeout,
    )


def ingest_documents(target: str, documents: dict[str, str] | None = None) -> None:
    """Ingests ``documents`` (path -> markdown; SMALL_CORPUS by default) over gRPC."""
    requests = [
        corpus_pb2.IngestDocumentsRequest(document=corpus_pb2.Document(path=p, content=c))
        for p, c in (documents or SMALL_CORPUS).items()
    ]
    with grpc.insecure_channel(target) as channel:
        corpus_pb2_grpc.CorpusServiceStub(channel).IngestDocuments(iter(requests), timeout=120)


def command_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """``clean_env`` for a ``ragagent`` command over ``data_dir``: JSON log lines (for
    ``Ragagent.wait_for_event``) and two ONNX threads."""
    return clean_env(data_dir=str(data_dir), log_format="json", embedding_threads="2", **settings)


class Ragagent:
    """A running ``ragagent`` command; stderr is read as it comes."""

    def __init__(self, *argv: str, env: dict[str, str], cwd: Path = REPO) -> None:
        self.argv = argv
        self.process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", *argv],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: list[str] = []
        self._out: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        # stdout has its own reader: communicate() would read (and close) stderr under the
        # stderr reader's feet ("I/O operation on closed file" in that thread).
        self._out_reader = threading.Thread(target=self._read_out, daemon=True)
        self._out_reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()

    def _read_out(self) -> None:
        assert self.process.stdout is not None
        self._out.extend(self.process.stdout)

    @property
    def stderr(self) -> str:
        with self._changed:
            return "".join(self._lines)

    def wait_for_event(self, event: str, timeout: float = 60.0) -> dict[str, Any]:
        """The first JSON log line whose event is ``event``; fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self._lines:
                    if line.startswith("{"):
                        record: dict[str, Any] = json.loads(line)
                        if record.get("event") == event:
                            return record
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise AssertionError(
                        f"no {event!r} from ragagent {' '.join(self.argv)}:\n{''.join(self._lines)}"
                    )
                self._changed.wait(min(left, 0.2))

    def stop(self, sig: signal.Signals, timeout: float = 30.0) -> tuple[int, float]:
        """Sends ``sig``; the exit code and the seconds until the process ended."""
        sent = time.monotonic()
        self.process.send_signal(sig)
        code = self.process.wait(timeout)
        elapsed = time.monotonic() - sent
        self._reader.join(5)
        return code, elapsed

    def finish(self, timeout: float = 300.0) -> tuple[int, str]:
        """Waits for the end: the exit code and stdout."""
        self.process.wait(timeout)
        self._reader.join(5)
        self._out_reader.join(5)
        return self.process.returncode, "".join(self._out)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
