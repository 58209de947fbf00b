"""docs/clients.md's examples, as written, against the real server with mutual TLS and API
keys: each streams an answer, then fails UNAUTHENTICATED, naming the ErrorInfo reason, with a
wrong key.

TypeScript: its package.json, tsconfig.json and ask.ts are taken from the page into an empty
folder, and its shell steps run there (buf generate from the repository, tsc, node). Go: the
page's ask.go is compiled against the code the session's Go client build generated (GOPATH
mode on Debian's packages, as scripts/build-clients.sh builds). Java: the page's Ask.java runs
as `java -cp ... Ask.java` on the classpath of the session's Java client build.

`npm install` is the one step not run as written: the folder links the node_modules that
tests/interop/ts installed from its package-lock.json, after checking that the page pins
exactly the versions of that lock's package.json (so the result is the same, without the
registry)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.helpers import Running
from tests.interop.support import NODE, NPM, PROJECT_ROOT, TS_DIR
from tests.security.support import CertFiles, client_cert, new_key, server_cert

pytestmark = pytest.mark.slow

DOC = PROJECT_ROOT / "docs" / "clients.md"
GOCODE = os.environ.get("GOCODE", "/usr/share/gocode")


def _blocks(heading: str, following: str) -> dict[str, list[str]]:
    text = DOC.read_text()
    section = text[text.index(heading) : text.index(following)]
    blocks: dict[str, list[str]] = {}
    for language, body in re.findall(r"^```(\w+)\n(.*?)^```$", section, re.M | re.S):
        blocks.setdefault(language, []).append(body)
    return blocks


@pytest.fixture
def pki(tmp_path: Path) -> tuple[Path, CertFiles, CertFiles]:
    folder = tmp_path / "pki"
    folder.mkdir()
    ca = trustme.CA()
    ca_file = folder / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return ca_file, server_cert(ca, folder), client_cert(ca, folder, common_name="docs")


@pytest.fixture
def api_key(tmp_path: Path) -> tuple[Path, str]:
    file = tmp_path / "keys.jsonl"
    _, key = new_key(file, "docs-reader", "ask")
    return file, key


@pytest.fixture
def server_settings(
    pki: tuple[Path, CertFiles, CertFiles], api_key: tuple[Path, str]
) -> dict[str, Any]:
    ca_file, server, _ = pki
    return {
        "tls_cert_file": server.cert,
        "tls_key_file": server.key,
        "tls_client_ca_file": ca_file,
        "api_keys_file": api_key[0],
        # The sample corpus has no access labels: readable by every authenticated caller.
        "access_unlabelled": "public",
    }


async def _bash(script: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-euo",
        "pipefail",
        "-c",
        script,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.skipif(NODE is None or NPM is None, reason="needs `node` and `npm` on PATH")
async def test_the_typescript_example_compiles_and_runs_over_mutual_tls_with_a_key(
    ts_client: Path,  # built once: node_modules installed from the lock
    server: Running,
    pki: tuple[Path, CertFiles, CertFiles],
    api_key: tuple[Path, str],
    tmp_path: Path,
) -> None:
    blocks = _blocks("### TypeScript (connect-es)", "### Go (grpc-go)")
    package, tsconfig = (json.loads(body) for body in blocks["json"])
    (steps,) = blocks["sh"]
    (example,) = blocks["ts"]
    assert package["type"] == "module"
    tested = json.loads((TS_DIR / "package.json").read_text())
    assert package["dependencies"] == tested["dependencies"]
    assert package["devDependencies"] == tested["devDependencies"]

    folder = tmp_path / "clean"
    folder.mkdir()
    (folder / "package.json").write_text(json.dumps(package))
    (folder / "tsconfig.json").write_text(json.dumps(tsconfig))
    (folder / "ask.ts").write_text(example)
    ca_file, _, client = pki
    shutil.copyfile(ca_file, folder / "ca.pem")
    shutil.copyfile(client.cert, folder / "client.pem")
    shutil.copyfile(client.key, folder / "client.key")
    assert steps.startswith("npm install\n")
    script = steps.replace("npm install\n", f"ln -s {TS_DIR / 'node_modules'} node_modules\n", 1)
    env = {
        **os.environ,
        "RAGAGENT": str(PROJECT_ROOT),
        "RAGAGENT_ADDRESS": server.target,
        "RAGAGENT_API_KEY": api_key[1],
    }
    code, out, err = await _bash(script, folder, env)
    assert code == 0, f"{out}\n{err}"
    assert "DDS" in out, out
    assert (folder / "gen" / "ts" / "ragagent" / "v1" / "agent_pb.ts").is_file()

    # A wrong key: UNAUTHENTICATED, with ErrorInfo's reason, and exit code 3. (With no key at
    # all, mutual TLS names the caller by its certificate, which holds no role here.)
    wrong = {**env, "RAGAGENT_API_KEY": api_key[1][:-4] + "xxxx"}
    code, out, err = await _bash("node dist/ask.js", folder, wrong)
    assert code == 3, f"{out}\n{err}"
    assert err.startswith("Unauthenticated CREDENTIALS_INVALID"), err


def _client_folder(folder: Path, pki: tuple[Path, CertFiles, CertFiles]) -> Path:
    """An empty folder with the files the examples read: ca.pem, client.pem, client.key."""
    folder.mkdir()
    ca_file, _, client = pki
    shutil.copyfile(ca_file, folder / "ca.pem")
    shutil.copyfile(client.cert, folder / "client.pem")
    shutil.copyfile(client.key, folder / "client.key")
    return folder


async def _exec(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def _ask_twice(
    command: list[str], folder: Path, server: Running, key: str
) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """The example with the key, then with a wrong one."""
    env = {**os.environ, "RAGAGENT_API_KEY": key}
    question = ["127.0.0.1:" + server.target.rsplit(":", 1)[1], "Which middleware does ROS 2 use?"]
    right = await _exec([*command, *question], folder, env)
    wrong = await _exec(
        [*command, *question], folder, {**env, "RAGAGENT_API_KEY": key[:-4] + "xxxx"}
    )
    return right, wrong


async def test_the_go_example_compiles_and_runs_over_mutual_tls_with_a_key(
    go_client: list[str],  # built once: the generated code in its GOPATH
    server: Running,
    pki: tuple[Path, CertFiles, CertFiles],
    api_key: tuple[Path, str],
    tmp_path: Path,
) -> None:
    (program,) = _blocks("### Go (grpc-go)", "### Java (grpc-java)")["go"]
    gopath = Path(go_client[0]).parents[1] / "gopath"
    package = tmp_path / "gopath" / "src" / "docs-example" / "ask"
    package.mkdir(parents=True)
    (package / "ask.go").write_text(program)
    binary = tmp_path / "ask"
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOFLAGS": "",
        "GOPATH": f"{tmp_path / 'gopath'}:{gopath}:{GOCODE}",
    }
    build = ["go", "build", "-o", str(binary), "docs-example/ask"]
    code, out, err = await _exec(build, package, env)
    assert code == 0, f"{out}\n{err}"

    folder = _client_folder(tmp_path / "clean", pki)
    (code, out, err), (wrong_code, _, wrong_err) = await _ask_twice(
        [str(binary)], folder, server, api_key[1]
    )
    assert code == 0, f"{out}\n{err}"
    assert "DDS" in out, out
    assert wrong_code == 1, wrong_err
    assert "reason CREDENTIALS_INVALID (ragagent.dev)" in wrong_err, wrong_err


async def test_the_java_example_compiles_and_runs_over_mutual_tls_with_a_key(
    java_client: list[str],  # built once: generated code and Debian's jars on its classpath
    server: Running,
    pki: tuple[Path, CertFiles, CertFiles],
    api_key: tuple[Path, str],
    tmp_path: Path,
) -> None:
    (program,) = _blocks("### Java (grpc-java)", "### Python")["java"]
    java, options, flag, classpath, _ = java_client
    folder = _client_folder(tmp_path / "clean", pki)
    (folder / "Ask.java").write_text(program)
    (code, out, err), (wrong_code, _, wrong_err) = await _ask_twice(
        [java, options, flag, classpath, "Ask.java"], folder, server, api_key[1]
    )
    assert code == 0, f"{out}\n{err}"
    assert "DDS" in out, out
    assert wrong_code == 1, wrong_err
    assert "reason CREDENTIALS_INVALID (ragagent.dev)" in wrong_err, wrong_err
