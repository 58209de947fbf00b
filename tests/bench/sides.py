"""The servers the overhead benchmark compares, each a process of its own, and what /proc
says about them: CPU time (utime + stime, all threads) and peak RSS (VmHWM, which the
benchmark resets between phases through /proc/<pid>/clear_refs); and, where ``perf`` can
count them, the instructions a process executed, which unlike CPU time hardly move with
what else the machine is doing."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from tests.processes import (
    REPO,
    ServerProcess,
    clean_env,
    free_port,
    ingest_folder,
    start_server,
)

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_SCHEDSTAT = Path("/proc/self/schedstat").exists()


def cpu_seconds(pid: int) -> float:
    """CPU time of a process so far, every thread included: to the nanosecond from each
    thread's schedstat where the kernel keeps one (a round of a few questions is a few
    hundred milliseconds, which clock ticks would measure to 2-5 %), else user plus system
    time in ticks. The servers' threads are pools that live as long as the process: a thread
    that ends between two readings, whose time the first way loses, is not one of theirs."""
    if _SCHEDSTAT:
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime (fields 14, 15)


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise LookupError(f"{key} not in /proc/{pid}/status")


def peak_rss_mib(pid: int) -> float:
    return _status_kib(pid, "VmHWM") / 1024


def reset_peak_rss(pid: int) -> None:
    """Starts VmHWM again from the current RSS (Linux: "5" to clear_refs)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def perf_counts() -> bool:
    """Whether ``perf stat`` can count instructions here (not in every VM or container)."""
    if shutil.which("perf") is None:
        return False
    done = subprocess.run(
        ["perf", "stat", "-x", ",", "-e", "instructions", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode == 0 and "not supported" not in done.stderr


@dataclass
class Counted:
    instructions: float | None = None  # None: perf could not count them


@contextlib.asynccontextmanager
async def instructions(pid: int, *, enabled: bool) -> AsyncIterator[Counted]:
    """The instructions ``pid`` (every thread) executes inside the block, by ``perf stat``."""
    counted = Counted()
    if not enabled:
        yield counted
        return
    perf = await asyncio.create_subprocess_exec(
        *("perf", "stat", "-x", ",", "-e", "instructions", "-p", str(pid)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    await asyncio.sleep(0.2)  # attached: perf prints nothing until it stops
    try:
        yield counted
    finally:
        perf.send_signal(2)  # SIGINT: perf prints its counts and exits
        _, err = await asyncio.wait_for(perf.communicate(), timeout=30)
        for line in err.decode().splitlines():  # value,unit,event,...
            value, _, event, *_ = [*line.split(","), "", ""]
            if event.startswith("instructions") and value.isdigit():
                counted.instructions = float(value)


class MinimalProcess:
    """A baseline server (tests/bench/floor_server.py or peer_server.py) on a free port."""

    def __init__(self, module: str, args: list[str], folder: Path, settings: dict[str, str]):
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log_path = folder / "server.log"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module, str(self.port), *args],
                env=clean_env(**settings),
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
            )

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self, timeout: float = 90.0) -> None:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline().decode() if ready else ""
        if line.strip() != "ready":
            self.stop(5)
            log = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{' '.join(self.process.args)} did not start:\n{log}")  # type: ignore[arg-type]

    def stop(self, timeout: float = 30.0) -> int:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


@dataclass
class Side:
    """One server under comparison: its name in the report and its process."""

    name: str
    server: ServerProcess | MinimalProcess

    @property
    def target(self) -> str:
        return self.server.target

    def cpu(self) -> float:
        return cpu_seconds(self.server.pid)

    def peak_rss(self) -> float:
        return peak_rss_mib(self.server.pid)

    def reset_peak(self) -> None:
        reset_peak_rss(self.server.pid)

    def check(self) -> None:
        if not self.server.alive():
            raise RuntimeError(f"{self.name} died; its log: {self.server.log_path}")


CACHE = REPO / ".cache" / "bench"
KEEP_STORES = 4  # ingested data dirs kept (the book's is 8-17 MiB)


def ingested(corpus: Path) -> Path:
    """A data dir holding ``corpus`` ingested by ``ragagent ingest``, made once and kept
    under .cache/bench: on a busy 2-core machine the textbook takes minutes to embed. The
    folder is named by what decides its content (the corpus files, the ingestion and
    retrieval code, the defaults of the embedding and store settings), so a change to any of
    them ingests again."""
    digest = hashlib.sha256()
    for path in sorted(corpus.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(corpus)).encode() + path.read_bytes())
    for folder in ("ingest", "retrieval"):
        for path in sorted((REPO / "service" / folder).glob("*.py")):
            digest.update(path.read_bytes())
    from service.config import Settings

    for name, setting in sorted(Settings.model_fields.items()):
        if name.startswith(("embedding_", "qdrant_", "retrieval_")):
            default = setting.get_default(call_default_factory=True)
            digest.update(f"{name}={default!r}".encode())
    ready = CACHE / f"store-{digest.hexdigest()[:16]}"
    if not (ready / "complete").exists():
        making = ready.with_suffix(f".{os.getpid()}")
        shutil.rmtree(making, ignore_errors=True)
        started = time.monotonic()
        ingest_folder(making, corpus, timeout=1800)  # the book: 40 s idle, 185 s measured busy
        (making / "complete").write_text(f"{corpus}\n")
        shutil.rmtree(ready, ignore_errors=True)
        making.rename(ready)
        print(f"  ingested {corpus} in {time.monotonic() - started:.0f} s (kept in {ready})")
    else:
        print(f"  {corpus} as ingested before ({ready})")
    (ready / "complete").touch()  # last used: the folders least recently used go
    kept = sorted(CACHE.glob("store-*/complete"), key=lambda c: c.stat().st_mtime)
    for old in kept[:-KEEP_STORES]:
        shutil.rmtree(old.parent, ignore_errors=True)
    return ready


def data_copy(prepared: Path, folder: Path) -> Path:
    """A copy of the ingested data dir for one server: the embedded store is one process's."""
    shutil.copytree(prepared, folder, ignore=shutil.ignore_patterns("*.log", "complete"))
    return folder


def revision_code(revision: str) -> list[Path]:
    """What a server runs to be git ``revision`` of ragagent: its ``service/`` and
    ``generated/``, exported once under .cache/bench, to go first on its PYTHONPATH (the
    installed packages are this checkout's)."""
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise ValueError(f"{revision!r} is not a commit of {REPO}")
    commit = found.stdout.strip()
    tree = CACHE / f"revision-{commit[:12]}"
    if not (tree / "service").is_dir():
        making = tree.with_suffix(f".{os.getpid()}")
        shutil.rmtree(making, ignore_errors=True)
        making.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", commit, "service", "generated"],
            cwd=REPO,
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise ValueError(f"{revision!r} has no service/ to run: {archive.stderr.decode()}")
        subprocess.run(["tar", "-x", "-C", str(making)], input=archive.stdout, check=True)
        shutil.rmtree(tree, ignore_errors=True)
        making.rename(tree)
    return [tree, tree / "generated"]


def launch(
    kind: str,
    folder: Path,
    prepared: Path,
    mode: str,
    settings: dict[str, str],
    *,
    code: list[Path] | None = None,
) -> Side:
    """``ragagent`` (``ragagent serve``), ``floor`` or ``peer``, serving over a copy of
    ``prepared``, in ``mode`` (retrieve_first or agentic; the peer is agentic only).
    ``code``: ragagent's code of another revision (:func:`revision_code`)."""
    data = data_copy(prepared, folder / "data")
    chosen = {**settings, "data_dir": str(data)}
    started = time.monotonic()
    if kind == "ragagent":
        server: ServerProcess | MinimalProcess = start_server(
            folder, code=code or (), **chosen, agent_strategy=mode
        )
    else:
        module = "tests.bench.floor_server" if kind == "floor" else "tests.bench.peer_server"
        server = MinimalProcess(module, [mode] if kind == "floor" else [], folder, chosen)
        server.wait_ready()
    name = kind if kind == "peer" else f"{kind} ({mode})"
    print(f"  started {name} in {time.monotonic() - started:.1f} s (pid {server.pid})")
    return Side(kind, server)
