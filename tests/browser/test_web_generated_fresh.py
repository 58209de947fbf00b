"""web/src/gen is exactly what `make web-gen` makes from protos/ (protoc-gen-es from web/'s
pinned npm packages), so the widget never speaks an older contract than the server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "web" / "node_modules" / ".bin" / "protoc-gen-es"
PROTO_DEPS = ROOT / ".cache" / "protos"
COMMITTED = ROOT / "web" / "src" / "gen"


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_the_widget_typescript_matches_the_protos(tmp_path: Path) -> None:
    if not PLUGIN.exists():
        pytest.skip("web/node_modules is missing: run `make web` (npm ci)")
    if not PROTO_DEPS.is_dir():
        pytest.skip(".cache/protos is missing: run `make setup`")
    protos = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "protos").rglob("*.proto"))
    command = [
        sys.executable, "-m", "grpc_tools.protoc", "-I", "protos", "-I", ".cache/protos",
        f"--plugin=protoc-gen-es={PLUGIN}", f"--es_out={tmp_path}",
        "--es_opt=target=ts,import_extension=none",
        *protos, ".cache/protos/buf/validate/validate.proto",
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    fresh, committed = _files(tmp_path), _files(COMMITTED)
    stale = sorted(n for n in fresh.keys() | committed.keys() if fresh.get(n) != committed.get(n))
    assert not stale, f"web/src/gen is stale: run `make web-gen && make web`: {stale}"


def test_the_committed_bundle_is_built_from_the_sources(tmp_path: Path) -> None:
    esbuild = ROOT / "web" / "node_modules" / ".bin" / "esbuild"
    if not esbuild.exists():
        pytest.skip("web/node_modules is missing: run `make web` (npm ci)")
    out = tmp_path / "widget.js"
    # The command of web/package.json's "build" script, into a temporary file.
    done = subprocess.run(
        [str(esbuild), "src/widget.ts", "--bundle", "--minify", "--format=esm",
         "--target=es2020", "--legal-comments=none", f"--outfile={out}"],
        cwd=ROOT / "web", capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == (ROOT / "web" / "dist" / "widget.js").read_bytes(), (
        "web/dist/widget.js is stale: run `make web`"
    )
    index = (ROOT / "web" / "src" / "index.html").read_bytes()
    assert index == (ROOT / "web" / "dist" / "index.html").read_bytes()
