"""The real model server, started once for the module that needs it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realmodel.support import FIGURES, ModelServer, missing, start_server


@pytest.fixture(scope="session")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    why = missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real-model tests: {why}")
        pytest.skip(why)
    FIGURES.unlink(missing_ok=True)
    log: Path = tmp_path_factory.mktemp("llama") / "server.log"
    server = start_server(log)
    try:
        yield server
    finally:
        server.process.terminate()
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.process.kill()
        if FIGURES.exists():
            print("\nreal-model figures:", json.dumps(json.loads(FIGURES.read_text())))
