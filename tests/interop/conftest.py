"""The real server on port 0, in-process, over an embedded store holding ``documents``; the
Node.js client (client.mjs) with its node_modules installed; and the Go, Java and TypeScript
example clients, each built once per session here (fixtures imported into several modules
were built once per module, and a later build removed the TypeScript client's dist/ that
an earlier one had made)."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from service.domain import Chunk
from tests.helpers import Running, running_server
from tests.interop.support import (
    BUILD,
    BUILD_TIMEOUT_S,
    DOCS,
    EXIT_TOOLCHAIN,
    INTEROP_DIR,
    NODE_CLIENT,
    NPM,
    PROJECT_ROOT,
    THIRD_PARTY_PROTOS,
    TS_DIR,
)

NPM_TIMEOUT_S = 300.0


@pytest.fixture
def documents() -> list[Chunk]:
    """What the server holds; a module overrides it to hold more."""
    return DOCS


@pytest.fixture
def server_settings() -> dict[str, Any]:
    """Settings of the server beyond the defaults (e.g. TLS, an API keys file); a module
    overrides it."""
    return {}


@pytest.fixture
async def server(
    tmp_path: Path, documents: list[Chunk], server_settings: dict[str, Any]
) -> AsyncIterator[Running]:
    async with running_server(tmp_path, documents=documents, **server_settings) as srv:
        yield srv


@pytest.fixture(scope="session")
def node_client() -> Path:
    """client.mjs with its node_modules installed from package-lock.json (once per session)."""
    if not THIRD_PARTY_PROTOS.is_dir():
        pytest.skip(f"third-party protos not fetched into {THIRD_PARTY_PROTOS}: run `make setup`")
    # Without --dist loadfile (make test's) two workers' sessions may each need it: one
    # installs while the other waits.
    with (INTEROP_DIR / ".npm-ci.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _npm_ci_once()
    return NODE_CLIENT


def _npm_ci_once() -> None:
    """`npm ci` in INTEROP_DIR unless the client's module is there to import: a folder of
    @grpc/grpc-js without its build (an install cut short) once failed every Node test."""
    if not (
        INTEROP_DIR / "node_modules" / "@grpc" / "grpc-js" / "build" / "src" / "index.js"
    ).is_file():
        assert NPM is not None
        try:
            result = subprocess.run(
                [NPM, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
                cwd=INTEROP_DIR,
                capture_output=True,
                text=True,
                timeout=NPM_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"`npm ci` in {INTEROP_DIR} took more than {NPM_TIMEOUT_S:.0f} s: "
                "is the npm registry reachable?"
            )
        if result.returncode != 0:
            pytest.fail(
                f"`npm ci` in {INTEROP_DIR} failed (exit {result.returncode}); it needs the npm "
                f"registry and a package-lock.json in sync with package.json:\n"
                f"{result.stderr[-4000:]}"
            )


BUF = PROJECT_ROOT / ".venv" / "bin" / "buf"


def _build(language: str, out: Path) -> None:
    if not BUF.is_file():
        pytest.skip(f"buf not installed at {BUF}: run `make setup`")
    if not THIRD_PARTY_PROTOS.is_dir():
        pytest.skip(f"third-party protos not fetched into {THIRD_PARTY_PROTOS}: run `make setup`")
    try:
        result = subprocess.run(
            ["bash", str(BUILD), "--out", str(out), language],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"build-clients.sh {language} took more than {BUILD_TIMEOUT_S:.0f} s")
    if result.returncode == EXIT_TOOLCHAIN:
        pytest.skip(f"{language} toolchain not installed: {result.stdout.strip()}")
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="session")
def go_client(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("clients")
    _build("go", out)
    return [str(out / "go" / "bin" / "ragagent-ask")]


@pytest.fixture(scope="session")
def java_client(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("clients")
    _build("java", out)
    classpath = (out / "java" / "classpath").read_text()
    options = (out / "java" / "jvm-options").read_text()  # netty-tcnative, for TLS
    return ["java", options, "-cp", classpath, "dev.ragagent.example.AskStream"]


@pytest.fixture(scope="session")
def ts_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """client.ts generated, type-checked and compiled to dist/client.js (once per session),
    then copied out of the source tree: another build of tests/interop/ts (`make clients`, a
    second test process) starts by removing its dist/, which once broke tests mid-run.

    scripts/build-clients.sh does it (as `make clients` does): `npm ci` when
    package-lock.json changed, `buf generate` with clients/typescript/buf.gen.yaml (failing
    if it wrote anything but ragagent/v1), google/rpc/error_details.proto on purpose, `tsc`.
    """
    if not THIRD_PARTY_PROTOS.is_dir():
        pytest.skip(f"third-party protos not fetched into {THIRD_PARTY_PROTOS}: run `make setup`")
    try:
        result = subprocess.run(
            ["bash", str(BUILD), "typescript"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"build-clients.sh typescript took more than {BUILD_TIMEOUT_S:.0f} s: "
            "is the npm registry reachable?"
        )
    assert result.returncode == 0, (
        f"build-clients.sh typescript failed (exit {result.returncode}); `npm ci` needs the "
        f"npm registry and a package-lock.json in sync with package.json:\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    gen = TS_DIR / "gen" / "ts"
    generated = sorted(str(p.relative_to(gen)) for p in gen.rglob("*.ts"))
    assert generated == [
        "google/rpc/error_details_pb.ts",
        "ragagent/v1/agent_pb.ts",
        "ragagent/v1/corpus_pb.ts",
        "ragagent/v1/session_pb.ts",
        "ragagent/v1/types_pb.ts",
    ]
    # The compiled client with what Node needs beside it: the package type and the modules.
    copy = tmp_path_factory.mktemp("ts-client")
    with (TS_DIR / ".build.lock").open("w") as lock:  # the build script's lock: no build now
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.copytree(TS_DIR / "dist", copy / "dist")
    shutil.copyfile(TS_DIR / "package.json", copy / "package.json")
    (copy / "node_modules").symlink_to(TS_DIR / "node_modules", target_is_directory=True)
    return copy / "dist" / "client.js"
