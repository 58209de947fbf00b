"""generated/ragagent is exactly what protos/ generates: the equivalent of `make check-gen`.

The code is regenerated into a temporary folder with the command of the Makefile's
``gen-into`` target (grpc_tools' protoc with the python, grpc, mypy, mypy-grpc and
connectrpc plugins), then compared file by file with the committed code. ``make check-gen``
itself is not run because it first runs ``make setup``, which provisions models.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
PROTO_DEPS = ROOT / ".cache" / "protos"
GENERATED = ROOT / "generated" / "ragagent"
# Made by hand (`touch` in the Makefile), not by protoc.
HAND_MADE = {"__init__.py", "py.typed"}


def _files(root: Path) -> dict[str, bytes]:
    """Relative path -> content of every generated file under root."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.name not in HAND_MADE
    }


def _diff(name: str, fresh: bytes, committed: bytes) -> str:
    lines = difflib.unified_diff(
        committed.decode(errors="replace").splitlines(),
        fresh.decode(errors="replace").splitlines(),
        f"generated/ragagent/{name}",
        f"regenerated/{name}",
        lineterm="",
        n=1,
    )
    return "\n".join(list(lines)[:20])


def regenerate(out: Path) -> Path:
    """Runs protoc as `make gen-into OUT=out` does; returns out/ragagent."""
    if not PROTO_DEPS.is_dir():
        pytest.skip(f"{PROTO_DEPS.relative_to(ROOT)} is missing (buf/validate): run `make setup`")
    bin_dir = Path(sys.executable).parent
    for plugin in ("protoc-gen-mypy", "protoc-gen-mypy_grpc", "protoc-gen-connectrpc"):
        if not (bin_dir / plugin).exists() and shutil.which(plugin) is None:
            pytest.skip(f"{plugin} is not installed: run `make setup`")
    protos = sorted(path.relative_to(ROOT).as_posix() for path in PROTOS.rglob("*.proto"))
    command = [
        sys.executable, "-m", "grpc_tools.protoc",
        "-I", "protos", "-I", str(PROTO_DEPS.relative_to(ROOT)),
        f"--python_out={out}", f"--grpc_python_out={out}",
        f"--mypy_out={out}", f"--mypy_grpc_out={out}",
        f"--connectrpc_out={out}", "--connectrpc_opt=protobuf=google",
        *protos,
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"protoc failed:\n{result.stderr}"
    return out / "ragagent"


def test_generated_code_matches_the_protos(tmp_path: Path) -> None:
    fresh = _files(regenerate(tmp_path))
    committed = _files(GENERATED)
    assert fresh, "protoc generated nothing"

    problems = [
        f"missing: generated/ragagent/{name}" for name in sorted(fresh.keys() - committed.keys())
    ]
    problems += [
        f"left over (no .proto generates it): generated/ragagent/{name}"
        for name in sorted(committed.keys() - fresh.keys())
    ]
    problems += [
        _diff(name, fresh[name], committed[name])
        for name in sorted(fresh.keys() & committed.keys())
        if fresh[name] != committed[name]
    ]
    assert not problems, (
        "generated/ is stale: run `make gen` and commit generated/.\n\n" + "\n".join(problems)
    )


def test_the_hand_made_package_files_exist() -> None:
    """Without them `ragagent.v1` does not import, or type checkers ignore it."""
    for name in ("__init__.py", "py.typed", "v1/__init__.py"):
        assert (GENERATED / name).is_file(), f"generated/ragagent/{name} is missing"
