"""The real server on port 0, in-process, over an embedded store holding ``documents``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.domain import Chunk
from tests.helpers import Running, running_server
from tests.interop.support import DOCS


@pytest.fixture
def documents() -> list[Chunk]:
    """What the server holds; a module overrides it to hold more."""
    return DOCS


@pytest.fixture
async def server(tmp_path: Path, documents: list[Chunk]) -> AsyncIterator[Running]:
    async with running_server(tmp_path, documents=documents) as srv:
        yield srv
