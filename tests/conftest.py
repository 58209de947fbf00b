"""Suite-wide fixtures: no test may reach the network beyond this machine."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

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


def _shared_fixture(item: pytest.Item) -> str | None:
    """The name of the first module- or session-scoped fixture of this suite that the test
    uses, or None. Such a fixture is built once per worker process, and some are expensive
    (the book ingested, the real model server, npm's modules installed) or hold one resource
    (a model server and its figures file)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in info.names_closure:
        definitions = info.name2fixturedefs.get(name)
        if not definitions:
            continue
        definition = definitions[-1]
        if definition.scope not in ("module", "session"):
            continue
        if not getattr(definition.func, "__module__", "").startswith("tests."):
            continue  # pytest's and plugins' own (tmp_path_factory, event loops)
        if definition.scope == "module":
            return f"{item.path}::{name}"
        return name
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test`, `--dist loadgroup`), tests that share a module- or
    session-scoped fixture run on one worker, so that it is built once and its resource is
    never used by two processes; every other test is independent (servers on free ports,
    per-test data folders, a PostgreSQL database per worker) and goes wherever a core is free.
    A test may still name its group with ``@pytest.mark.xdist_group("name")``."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        group = _shared_fixture(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


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
