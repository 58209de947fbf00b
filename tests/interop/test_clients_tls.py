"""Interop over TLS with an API key: the Go, Java and TypeScript example clients (the ones
docs/clients.md shows, built by scripts/build-clients.sh from Debian's and npm's packages)
against the real server with TLS, an API keys file and, in one case, mutual TLS.

Each client trusts the test CA (``--tls-ca``), sends a client certificate when the server asks
for one (``--tls-cert``/``--tls-key``) and its key from RAGAGENT_API_KEY as
``authorization: Bearer``. It streams AskStream end to end (deltas adding up to the answer,
the request id echoed), and without the key gets UNAUTHENTICATED with ragagent's ErrorInfo
decoded from grpc-status-details-bin.

A language whose toolchain is missing is skipped, saying what it lacks (.ci/run installs them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.helpers import Running
from tests.interop.support import (
    EXIT_RPC_ERROR,
    UNAUTHENTICATED,
    check_ask_stream,
    run_client,
)
from tests.security.support import CertFiles, client_cert, new_key, server_cert

pytestmark = pytest.mark.slow


@pytest.fixture
def mutual_tls() -> bool:
    return False


@pytest.fixture
def pki(tmp_path: Path) -> tuple[Path, CertFiles, CertFiles]:
    """(CA file, server certificate, client certificate), all from one test CA."""
    folder = tmp_path / "tls"
    folder.mkdir()
    ca = trustme.CA()
    ca_file = folder / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return ca_file, server_cert(ca, folder), client_cert(ca, folder, common_name="client")


@pytest.fixture
def key_file(tmp_path: Path) -> tuple[Path, str]:
    file = tmp_path / "keys.jsonl"
    _, key = new_key(file, "interop", "ask")
    return file, key


@pytest.fixture
def server_settings(
    pki: tuple[Path, CertFiles, CertFiles], key_file: tuple[Path, str], mutual_tls: bool
) -> dict[str, Any]:
    ca_file, server, _ = pki
    settings: dict[str, Any] = {
        "tls_cert_file": server.cert,
        "tls_key_file": server.key,
        "api_keys_file": key_file[0],
        # The sample corpus has no access labels: readable by every authenticated caller.
        "access_unlabelled": "public",
    }
    if mutual_tls:
        settings["tls_client_ca_file"] = ca_file
    return settings


QUESTION = "Which middleware does ROS 2 rely on?"


@pytest.fixture(params=["go", "java", "typescript"])
def tls_client(request: pytest.FixtureRequest) -> tuple[list[str], list[str]]:
    """(the client's command, its arguments that ask QUESTION over AskStream)."""
    if request.param == "typescript":
        built: Path = request.getfixturevalue("ts_client")
        return ["node", str(built)], ["ask-stream", json.dumps({"query": QUESTION})]
    command: list[str] = request.getfixturevalue(f"{request.param}_client")
    return command, [QUESTION]


def _env(key: str) -> dict[str, str]:
    return {**os.environ, "RAGAGENT_API_KEY": key, "NO_COLOR": "1"}


@pytest.mark.parametrize("mutual_tls", [False, True], ids=["tls", "mutual-tls"])
async def test_ask_stream_over_tls_with_a_key(
    tls_client: tuple[list[str], list[str]],
    server: Running,
    pki: tuple[Path, CertFiles, CertFiles],
    key_file: tuple[Path, str],
    mutual_tls: bool,
) -> None:
    command, ask = tls_client
    ca_file, _, client = pki
    tls = ["--tls-ca", str(ca_file)]
    if mutual_tls:
        tls += ["--tls-cert", str(client.cert), "--tls-key", str(client.key)]
    result = await run_client(
        command, server.target, *tls, "--request-id", "tls-7", *ask, env=_env(key_file[1])
    )
    completed = check_ask_stream(result, "tls-7")
    assert "DDS" in completed["answer"]


async def test_no_key_is_unauthenticated_with_error_info(
    tls_client: tuple[list[str], list[str]],
    server: Running,
    pki: tuple[Path, CertFiles, CertFiles],
) -> None:
    command, ask = tls_client
    tls = ["--tls-ca", str(pki[0])]
    result = await run_client(
        command, server.target, *tls, "--request-id", "tls-nokey", *ask, env=_env("")
    )
    assert result.returncode == EXIT_RPC_ERROR, result.describe()
    error: dict[str, Any] = result.lines()[-1]["error"]
    assert error["code"] == UNAUTHENTICATED, result.describe()
    [info] = error["errorInfo"]
    assert info["domain"] == "ragagent.dev"
    assert info["reason"] == "UNAUTHENTICATED"
