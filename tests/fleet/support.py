"""A fleet on loopback: several ``ragagent serve`` processes sharing one PostgreSQL and one
Qdrant (the REST stand-in, tests/fleet/qdrant_standin.py), as compose or Kubernetes run it.

Every test gets its own PostgreSQL role and a schema of the same name in the database of
TEST_POSTGRES_DSN: PostgreSQL's default ``search_path`` ("$user", public) puts a role's
sessions in that schema, so the replicas share it and parallel tests (pytest-xdist) never
meet. Each replica has its own free port and data folder; a collection name of its own per
test keeps Qdrant state apart as well.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.processes import ServerProcess, free_port

POSTGRES_DSN = os.environ.get("TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


async def _admin(*statements: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(POSTGRES_DSN, timeout=3)
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


@contextmanager
def postgres_role() -> Iterator[str]:
    """A DSN (``postgresql://``) for a new role whose tables live in a schema of its own;
    both dropped at the end. Skips the test when PostgreSQL is not reachable."""
    role = f"fleet_{uuid.uuid4().hex[:12]}"
    try:
        asyncio.run(
            _admin(f'CREATE ROLE "{role}" LOGIN', f'CREATE SCHEMA "{role}" AUTHORIZATION "{role}"')
        )
    except OSError as error:
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_DSN} ({error!r})")
    parts = urlsplit(POSTGRES_DSN)
    host = parts.netloc.rsplit("@", 1)[-1]
    try:
        yield urlunsplit((parts.scheme, f"{role}@{host}", parts.path, parts.query, ""))
    finally:
        asyncio.run(
            _admin(
                f'DROP SCHEMA IF EXISTS "{role}" CASCADE',
                f'DROP OWNED BY "{role}" CASCADE',
                f'DROP ROLE IF EXISTS "{role}"',
            )
        )


def launch_replicas(
    folder: Path, count: int, *, qdrant_url: str, database_url: str, **settings: str
) -> list[ServerProcess]:
    """``count`` replicas started at once (not waited for), each in ``folder/replica-N``."""
    common = {
        "qdrant_url": qdrant_url,
        "database_url": database_url,
        "log_format": "json",
        **settings,
    }
    return [ServerProcess.launch(folder / f"replica-{i}", **common) for i in range(count)]


def wait_all_ready(replicas: Sequence[ServerProcess], timeout: float) -> None:
    """Until every replica serves; the first failure (death or timeout) is raised."""
    with ThreadPoolExecutor(len(replicas)) as pool:
        for done in [pool.submit(r.wait_ready, timeout) for r in replicas]:
            done.result()


@contextmanager
def fleet(
    folder: Path, count: int, *, qdrant_url: str, database_url: str, **settings: str
) -> Iterator[list[ServerProcess]]:
    """``count`` serving replicas for a ``with`` block; all stopped at the end."""
    replicas = launch_replicas(
        folder, count, qdrant_url=qdrant_url, database_url=database_url, **settings
    )
    try:
        wait_all_ready(replicas, 90.0)
        yield replicas
    finally:
        for replica in replicas:
            replica.stop()


def inconsistent_documents(local: Any, collection: str) -> list[str]:
    """Every document whose record and searchable chunks disagree, read straight from the
    stand-in's engine: a record whose chunk count, chunk ids or hash differ from the
    chunks stored under its document id, or chunks with no record (a half-written
    document is acceptable only while a writer is at work; callers check at rest)."""
    chunks: dict[str, list[dict[str, Any]]] = {}
    for point in _all(local, collection):
        chunks.setdefault(str(point.payload["document_id"]), []).append(point.payload)
    records = {}
    for point in _all(local, f"{collection}__documents"):
        record = point.payload["record"]
        records[str(record["document_id"])] = record
    problems = []
    for document_id in sorted(set(chunks) | set(records)):
        record, stored = records.get(document_id), chunks.get(document_id, [])
        if record is None:
            problems.append(f"{document_id}: {len(stored)} chunks and no record")
            continue
        hashes = {c["document_hash"] for c in stored}
        positions = sorted(int(c["position"]) for c in stored)
        if hashes != {record["document_hash"]} or positions != list(range(record["chunk_count"])):
            problems.append(
                f"{document_id}: record {record['document_hash'][:8]} x{record['chunk_count']}, "
                f"chunks {sorted(h[:8] for h in hashes)} at {positions}"
            )
    return problems


def _all(local: Any, collection: str) -> list[Any]:
    found, offset = [], None
    while True:
        page, offset = local.scroll(collection, limit=256, offset=offset, with_payload=True)
        found.extend(page)
        if offset is None:
            return found


PGBOUNCER = Path("/usr/sbin/pgbouncer")


@contextmanager
def pgbouncer(dsn: str) -> Iterator[str]:
    """A PgBouncer of this test's own (transaction pooling, a free port) in front of the
    database of ``dsn``; yields the DSN that goes through it. Skips without PgBouncer
    (``apt-get install pgbouncer``)."""
    if not PGBOUNCER.exists():
        pytest.skip("PgBouncer is not installed (apt-get install pgbouncer)")
    parts = urlsplit(dsn)
    user, _, hostport = parts.netloc.rpartition("@")
    host, _, port = hostport.partition(":")
    database = parts.path.lstrip("/")
    listen = free_port()
    # PgBouncer refuses to run as root: as root, it is started as nobody, who must be able
    # to read its files and write its log (a folder of its own outside pytest's 0700 tree).
    folder = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    folder.chmod(0o777)
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{database} = host={host} port={port or 5432} dbname={database}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {listen}\n"
        f"unix_socket_dir =\nauth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 4\nmax_client_conn = 200\n"
        f"logfile = {folder / 'pgbouncer.log'}\n"
    )
    process = subprocess.Popen(
        [
            str(PGBOUNCER),
            *(["-u", "nobody"] if os.geteuid() == 0 else []),
            str(folder / "pgbouncer.ini"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(listen, process)
        yield urlunsplit((parts.scheme, f"{user}@127.0.0.1:{listen}", parts.path, "", ""))
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"PgBouncer exited with {process.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError("PgBouncer did not listen within 10 s")
