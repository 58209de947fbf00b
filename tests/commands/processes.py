"""``ragagent`` run as a user runs it: in a process of its own, its log lines watched.

For what only a process shows (signals, exit codes, the server as a separate program).
Logs are JSON (one object a line on stderr), so that the tests can wait for an event.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

_WORDS = (
    "robot",
    "joint",
    "sensor",
    "motor",
    "camera",
    "planner",
    "topic",
    "node",
    "message",
    "link",
    "frame",
    "torque",
    "servo",
    "lidar",
    "depth",
    "map",
    "pose",
    "grasp",
    "arm",
    "wheel",
    "gripper",
    "odometry",
    "controller",
    "trajectory",
)


def write_corpus(root: Path, pages: int, *, seed: int = 1) -> Path:
    """``pages`` pages of four sections each (one chunk per section), in module folders."""
    rnd = random.Random(seed)
    for i in range(pages):
        path = root / f"module-{i // 50:02d}" / f"page-{i:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        sections = [
            f"## Section {s}\n\n" + " ".join(rnd.choice(_WORDS) for _ in range(120)) + ".\n"
            for s in range(4)
        ]
        path.write_text(f"# Page {i}\n\n" + "\n".join(sections), encoding="utf-8")
    return root


def environment(data_dir: Path, **extra: str) -> dict[str, str]:
    """The test's environment (RAGAGENT_ variables already cleared) with JSON logs."""
    return {
        **os.environ,
        "RAGAGENT_DATA_DIR": str(data_dir),
        "RAGAGENT_LOG_FORMAT": "json",
        "RAGAGENT_EMBEDDING_THREADS": "2",
        **extra,
    }


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
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()

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
        out, _ = self.process.communicate(timeout=timeout)
        self._reader.join(5)
        return self.process.returncode, out

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@contextmanager
def ragagent_server(data_dir: Path, **env: str) -> Iterator[str]:
    """``ragagent serve`` on a free loopback port; yields HOST:PORT, stops it with SIGTERM."""
    server = Ragagent("serve", env=environment(data_dir, RAGAGENT_ADDRESS="127.0.0.1:0", **env))
    try:
        port = server.wait_for_event("serving", timeout=120)["port"]
        yield f"127.0.0.1:{port}"
    finally:
        if server.process.poll() is None:
            server.stop(signal.SIGTERM)
        server.kill()
