"""The real server on port 0, in-process, over an embedded store holding ``documents``, and
the Node.js client (client.mjs) with its node_modules installed."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from service.domain import Chunk
from tests.helpers import Running, running_server
from tests.interop.support import DOCS, INTEROP_DIR, NODE_CLIENT, NPM, THIRD_PARTY_PROTOS

NPM_TIMEOUT_S = 300.0


@pytest.fixture
def documents() -> list[Chunk]:
    """What the server holds; a module overrides it to hold more."""
    return DOCS


@pytest.fixture
def server_settings() -> dict[str, Any]:
    """Settings of the server beyond the defaults (e.g. TLS, an API keys file); a module
    overrides it."""
    return {}


@pytest.fixture
async def server(
    tmp_path: Path, documents: list[Chunk], server_settings: dict[str, Any]
) -> AsyncIterator[Running]:
    async with running_server(tmp_path, documents=documents, **server_settings) as srv:
        yield srv


@pytest.fixture(scope="session")
def node_client() -> Path:
    """client.mjs with its node_modules installed from package-lock.json (once per session)."""
    if not THIRD_PARTY_PROTOS.is_dir():
        pytest.skip(f"third-party protos not fetched into {THIRD_PARTY_PROTOS}: run `make setup`")
    if not (INTEROP_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir():
        assert NPM is not None
        try:
            result = subprocess.run(
                [NPM, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
                cwd=INTEROP_DIR,
                capture_output=True,
                text=True,
                timeout=NPM_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"`npm ci` in {INTEROP_DIR} took more than {NPM_TIMEOUT_S:.0f} s: "
                "is the npm registry reachable?"
            )
        if result.returncode != 0:
            pytest.fail(
                f"`npm ci` in {INTEROP_DIR} failed (exit {result.returncode}); it needs the npm "
                f"registry and a package-lock.json in sync with package.json:\n"
                f"{result.stderr[-4000:]}"
            )
    return NODE_CLIENT
