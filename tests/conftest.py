"""Suite-wide fixtures: no test may reach the network beyond this machine."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from service.wiring.heap import settle_heap
from tests.fakes.openai_server import FakeOpenAI

SHARED_CORPUS = (
    Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "physical-ai-book"
)

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_local(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded_connect(self: socket.socket, address: Any) -> None:
    if not _is_local(address):
        raise RuntimeError(f"test tried to reach the network: {address!r}")
    _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    if not _is_local(address):
        raise RuntimeError(f"test tried to reach the network: {address!r}")
    return _real_connect_ex(self, address)


# Folders whose tests share state outside a test's own folder, so that under pytest-xdist all
# of each runs on one worker: the clients in other languages install into the source tree
# (two `npm ci` at once in tests/interop/node_modules break each other), and the real-model
# tests share one model server and its figures file.
SHARED_FOLDERS = ("tests/interop/", "tests/realmodel/")
LONGEST_FOLDER = "tests/realmodel/"


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (make test), with each folder of SHARED_FOLDERS as one unit.

    A file is the unit because module-scoped fixtures (a server fuzzed by a whole module, a
    compiled descriptor set) are built once per process: split over workers, each would
    build its own. Everything else is independent (servers on free ports, per-test data
    folders, a PostgreSQL database per worker: tests/sessions/conftest.py). pytest-xdist's
    own `xdist_group` marks cannot do this: with pytest 9 its renaming of node ids no longer
    reaches the scheduler."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    config.option.loadscopereorder = False  # the order is set below

    class FoldersAndFiles(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return next((f for f in SHARED_FOLDERS if path.startswith(f)), path)

        def schedule(self) -> None:
            """The longest units first, so that none starts last: the real-model tests (minutes
            of model time), then the other units by their number of tests."""
            if self.collection is None:
                for node, nodeids in self.registered_collections.items():
                    sizes = Counter(self._split_scope(n) for n in nodeids)

                    def first(nodeid: str, sizes: Counter[str] = sizes) -> tuple[bool, int]:
                        scope = self._split_scope(nodeid)
                        return (scope != LONGEST_FOLDER, -sizes[scope])

                    self.registered_collections[node] = sorted(nodeids, key=first)
            super().schedule()

    return FoldersAndFiles(config, log)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Each worker freezes its heap once the tests are collected, as `ragagent serve` does
    once the server is built (service.wiring.heap): in-process servers share the worker's
    ~390,000 objects of imported modules, and a full collection walking them held the
    interpreter 0.23-0.39 s, longer than the 0.25 s a run keeps to send its final message
    before its deadline (a deadline test failed so). Frozen, the longest was 0.06 s."""
    settle_heap()


@pytest.fixture(autouse=True)
def _forbid_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only loopback and Unix sockets; hubs and model downloads are forbidden outright."""
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    for var in list(os.environ):
        if var.startswith("RAGAGENT_"):
            monkeypatch.delenv(var, raising=False)


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeOpenAI]:
    """The scripted OpenAI-compatible fake on a loopback port (tests/fakes/openai_server.py)."""
    async with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def shared_corpus() -> Path:
    """The shared textbook; tests that need it skip where ../shared is absent."""
    if not SHARED_CORPUS.is_dir():
        pytest.skip(f"shared corpus not found at {SHARED_CORPUS} (../shared is absent)")
    return SHARED_CORPUS / "docs"
