"""What the soak reads of the server process from outside: RSS, open FDs by kind, tasks.

FDs are sorted by what they are, because two kinds legitimately vary between two quiet
moments: the connection pools to PostgreSQL and to the model endpoint grow under load and
shrink lazily (httpx closes an expired keep-alive connection only when the pool is next
used). Those are pools with a bound; what must come back to baseline is everything else.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import ServerProcess

POOLS = ("PostgreSQL connections", "model connections")
QUIET_FOR_S = 6.0  # longer than httpx's 5 s keep-alive expiry of idle model connections


def _tcp_ports(pid: int) -> dict[str, tuple[int, int, bool]]:
    """Socket inode -> (local port, remote port, listening) for the process's namespace."""
    sockets = {}
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        for line in path.read_text().splitlines()[1:] if path.exists() else ():
            cols = line.split()
            local, remote, state, inode = cols[1], cols[2], cols[3], cols[9]
            sockets[inode] = (
                int(local.rsplit(":", 1)[1], 16),
                int(remote.rsplit(":", 1)[1], 16),
                state == "0A",
            )
    return sockets


def fd_kinds(pid: int, server_port: int, model_port: int | None) -> Counter[str]:
    kinds: Counter[str] = Counter()
    tcp = _tcp_ports(pid)
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue  # closed while we looked
        if link.startswith("socket:["):
            local, remote, listening = tcp.get(link[8:-1], (0, 0, False))
            if listening:
                kind = "listening sockets"
            elif local == server_port:
                kind = "gRPC client connections"
            elif remote == 5432:
                kind = POOLS[0]
            elif model_port and remote == model_port:
                kind = POOLS[1]
            else:
                kind = "other sockets"
        else:
            kind = link.split(":", 1)[0] if ":" in link else "files"
        kinds[kind] += 1
    return kinds


@dataclass(frozen=True)
class Resources:
    rss_kib: int
    fd_kinds: Counter[str] = field(default_factory=Counter)
    tasks: int | None = None

    @property
    def fds(self) -> int:
        return sum(self.fd_kinds.values())

    @property
    def fds_but_pools(self) -> int:
        return sum(n for kind, n in self.fd_kinds.items() if kind not in POOLS)

    @classmethod
    def of(cls, server: ServerProcess, stats: Path, model_port: int | None) -> Resources:
        status = Path(f"/proc/{server.pid}/status").read_text()
        rss = [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")]
        tasks = int(stats.read_text()) if stats.exists() else None
        kinds = fd_kinds(server.pid, server.port, model_port)
        return cls(rss[0] if rss else 0, kinds, tasks)


async def quiet(
    server: ServerProcess, stats: Path, model_port: int | None, baseline: Resources | None
) -> Resources:
    """The server's resources once it is idle: back at ``baseline``, or unchanged for
    QUIET_FOR_S, or after 60 s, whichever comes first."""
    started = time.monotonic()
    last, since = Resources.of(server, stats, model_port), time.monotonic()
    while time.monotonic() - started < 60 and server.alive():
        await asyncio.sleep(0.5)
        now = Resources.of(server, stats, model_port)
        if (
            baseline
            and now.fds_but_pools <= baseline.fds_but_pools
            and (now.tasks or 0) <= (baseline.tasks or 0)
        ):
            return now
        if (now.fd_kinds, now.tasks) != (last.fd_kinds, last.tasks):
            since = time.monotonic()
        elif time.monotonic() - since >= QUIET_FOR_S:
            return now
        last = now
    return last
