"""scripts/fetch-protos.sh: the third-party protos for buf without Python.

A team in another language clones the repository, runs the script and then `buf build` /
`buf generate` (docs/clients.md). These tests keep the script's pins equal to those of
`python -m service.provision protos`, and run it on a copy of the contract with a PATH that
holds only the tools it names (no Python), then build that copy with buf.

The script reads downloads from the cache `make setup` fills; the test skips rather than
download when they are not there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from service.provision import PROTO_ARTIFACTS, STAMP

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = PROJECT_ROOT / "scripts" / "fetch-protos.sh"
BUF = PROJECT_ROOT / ".venv" / "bin" / "buf"
THIRD_PARTY_PROTOS = PROJECT_ROOT / ".cache" / "protos"

# What the script may run: the tools its header names and the shell utilities it uses.
TOOLS = (
    "bash",
    "curl",
    "tar",
    "gzip",
    "unzip",
    "sha256sum",
    "cut",
    "grep",
    "sed",
    "head",
    "tail",
    "mkdir",
    "mv",
    "rm",
    "cat",
    "dirname",
    "basename",
)


def _script_artifacts() -> list[tuple[str, str, str, dict[str, str]]]:
    text = SCRIPT.read_text()
    block = re.search(r"^ARTIFACTS=\(\n(.*?)^\)", text, re.MULTILINE | re.DOTALL)
    assert block is not None, "ARTIFACTS=( ... ) not found in the script"
    artifacts = []
    for line in re.findall(r'"([^"]+)"', block.group(1)):
        project, filename, sha256, members = line.split("|")
        pairs = dict(pair.split("=", 1) for pair in members.split())
        artifacts.append((project, filename, sha256, pairs))
    return artifacts


def test_pins_match_service_provision() -> None:
    expected = sorted((a.project, a.filename, a.sha256, dict(a.members)) for a in PROTO_ARTIFACTS)
    assert _script_artifacts() == expected


def _download_cache() -> Path:
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "ragagent" / "downloads"


def _python_free_path(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"scripts/fetch-protos.sh needs `{tool}` (not found)")
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_fetch_without_python_then_buf_build(tmp_path: Path) -> None:
    if not BUF.is_file():
        pytest.skip(f"buf not installed at {BUF}: run `make setup`")
    cache = _download_cache()
    missing = [a.filename for a in PROTO_ARTIFACTS if not (cache / a.filename).is_file()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not in {cache}: run `make setup` (no download here)")
    # A fresh clone's contract: protos/ and buf.yaml, no .cache.
    clone = tmp_path / "clone"
    shutil.copytree(PROJECT_ROOT / "protos", clone / "protos")
    shutil.copy(PROJECT_ROOT / "buf.yaml", clone / "buf.yaml")
    shutil.copytree(PROJECT_ROOT / "scripts", clone / "scripts")
    env = {
        "PATH": _python_free_path(tmp_path),
        "HOME": str(tmp_path / "home"),
        "RAGAGENT_DOWNLOAD_CACHE": str(cache),
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",  # never asked: the cache has the files
    }
    assert shutil.which("python3", path=env["PATH"]) is None
    result = subprocess.run(
        ["bash", "scripts/fetch-protos.sh"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    fetched = clone / ".cache" / "protos"
    assert sorted(str(p.relative_to(fetched)) for p in fetched.rglob("*.proto")) == [
        "buf/validate/validate.proto",
        "google/rpc/code.proto",
        "google/rpc/error_details.proto",
        "google/rpc/status.proto",
    ]
    # The same stamp as service.provision, so `make setup` afterwards sees it complete.
    if (THIRD_PARTY_PROTOS / STAMP).is_file():
        assert (fetched / STAMP).read_text() == (THIRD_PARTY_PROTOS / STAMP).read_text()
        for proto in fetched.rglob("*.proto"):
            relative = proto.relative_to(fetched)
            assert proto.read_bytes() == (THIRD_PARTY_PROTOS / relative).read_bytes()

    again = subprocess.run(
        ["bash", "scripts/fetch-protos.sh"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert "already up to date" in again.stdout

    build = subprocess.run(
        [str(BUF), "build", "-o", str(tmp_path / "image.binpb")],
        cwd=clone,
        env={**env, "BUF_CACHE_DIR": str(tmp_path / "buf-cache")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    assert (tmp_path / "image.binpb").stat().st_size > 0


def test_bad_cached_download_is_not_used(tmp_path: Path) -> None:
    """A cached download with the wrong content is not unpacked (nor trusted)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for artifact in PROTO_ARTIFACTS:
        (cache / artifact.filename).write_bytes(b"not the pinned file")
    env = {
        "PATH": _python_free_path(tmp_path),
        "HOME": str(tmp_path / "home"),
        "RAGAGENT_DOWNLOAD_CACHE": str(cache),
        # Nothing listens there: the re-download fails at once, and nothing is unpacked.
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    }
    result = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "protos")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert not (tmp_path / "protos").exists()
