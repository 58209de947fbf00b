"""Everything the service creates under RAGAGENT_DATA_DIR is its user's alone: the data
folder and the embedded Qdrant folder 0700 (the session database has its own test in
tests/sessions), whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.datadir import private_dir, private_file
from service.executor import INLINE
from service.retrieval.edge_shard import EdgeCalls
from service.retrieval.qdrant_payload import open_qdrant_client


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def lax_umask() -> Iterator[None]:
    """The usual umask (group and others may read): what the service must not rely on."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


async def test_the_embedded_qdrant_store_and_the_data_dir_are_private(tmp_path: Path) -> None:
    data = tmp_path / "home" / "data"
    client = open_qdrant_client(url=None, api_key=None, path=data / "qdrant", timeout=5)
    try:
        assert mode(tmp_path / "home") == 0o700  # a missing parent too
        assert mode(data) == 0o700
        assert mode(data / "qdrant") == 0o700
    finally:
        await client.close()


def test_the_embedded_edge_store_is_private(tmp_path: Path) -> None:
    data = tmp_path / "home" / "data"
    calls = EdgeCalls.open_blocking(
        data / "edge" / "docs", dimension=4, model_name="m", executor=INLINE, timeout=5
    )
    try:
        assert mode(tmp_path / "home") == mode(data) == 0o700
        assert mode(data / "edge") == mode(data / "edge" / "docs") == 0o700
    finally:
        calls.shard.close()


def test_existing_folders_and_files_keep_their_modes(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    database = private_file(shared / "db" / "sessions.db")
    assert (mode(shared), mode(database.parent), mode(database)) == (0o755, 0o700, 0o600)
    database.chmod(0o640)
    private_file(database)
    assert mode(database) == 0o640
    assert private_dir(shared) == shared
    assert mode(shared) == 0o755
