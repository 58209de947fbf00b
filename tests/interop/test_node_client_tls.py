"""Interop: the Node.js client (client.mjs, @grpc/grpc-js) over TLS with an API key.

The real server runs in-process with a certificate made here by trustme and an API keys file
(its ``ask`` key made by `ragagent keys create`, as an operator makes one); the client trusts
the test CA (``--tls-ca``) and sends its key as grpc-js call credentials (``authorization:
Bearer``). What a Node.js caller sees: the key works over TLS, no key is UNAUTHENTICATED and
a key without the role is PERMISSION_DENIED (each with the ErrorInfo reason decoded from
grpc-status-details-bin), plaintext does not reach a TLS port, and with mutual TLS a client
certificate is needed.

Needs what test_node_client.py needs (`node`, `npm`, the fetched protos).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.helpers import Running
from tests.interop.support import (
    EXIT_OK,
    EXIT_RPC_ERROR,
    NODE,
    NPM,
    PERMISSION_DENIED,
    UNAUTHENTICATED,
    UNAVAILABLE,
    ClientResult,
    run_node_client,
)
from tests.processes import REPO, clean_env
from tests.security.support import CertFiles, client_cert, new_key, server_cert

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None,
    reason="Node.js interop tests need `node` and `npm` on PATH (not found)",
)

QUESTION = {"query": "Which middleware does ROS 2 rely on?", "max_results": 3}
# No key from the caller's environment: each call says which key it sends.
NO_KEY_ENV = {"RAGAGENT_API_KEY": ""}


@dataclass(frozen=True)
class Tls:
    ca_file: Path
    server: CertFiles
    client: CertFiles  # signed by the same CA; the principal is its CN, "node-client"


@dataclass(frozen=True)
class Keys:
    file: Path
    asker: str  # role ask
    reader: str  # role corpus:read


@pytest.fixture
def mutual_tls() -> bool:
    """Whether the server asks for a client certificate; a test parametrises it."""
    return False


@pytest.fixture
def tls(tmp_path: Path) -> Tls:
    folder = tmp_path / "tls"
    folder.mkdir()
    ca = trustme.CA()
    ca_file = folder / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return Tls(ca_file, server_cert(ca, folder), client_cert(ca, folder, common_name="node-client"))


def _create_key(file: Path, principal: str, role: str) -> str:
    """A key made as an operator makes it: `ragagent keys create` prints it on its last line."""
    create = ["keys", "create", "--principal", principal, "--role", role, "--file", str(file)]
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", *create],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    key = result.stdout.splitlines()[-1]
    assert key.startswith("rak_"), result.stdout
    return key


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    file = tmp_path / "keys.jsonl"
    asker = _create_key(file, "node-asker", "ask")
    _, reader = new_key(file, "node-reader", "corpus:read")  # the CLI's path once is enough
    return Keys(file, asker, reader)


@pytest.fixture
def server_settings(tls: Tls, keys: Keys, mutual_tls: bool) -> dict[str, Any]:
    """conftest.py's server with TLS and the API keys file (and a client CA with mutual TLS)."""
    settings: dict[str, Any] = {
        "tls_cert_file": tls.server.cert,
        "tls_key_file": tls.server.key,
        "api_keys_file": keys.file,
        # The sample corpus has no access labels: readable by every authenticated caller.
        "access_unlabelled": "public",
    }
    if mutual_tls:
        settings["tls_client_ca_file"] = tls.ca_file
    return settings


def _error(result: ClientResult, code: int) -> dict[str, Any]:
    """The failed call client.mjs printed, with status ``code``."""
    assert result.returncode == EXIT_RPC_ERROR, result.describe()
    error: dict[str, Any] = result.json()
    assert error["code"] == code, result.describe()
    return error


def _reason(error: dict[str, Any]) -> str:
    """The ErrorInfo reason of the google.rpc.Status in grpc-status-details-bin."""
    status = error["metadata"]["grpc-status-details-bin"]
    assert status["code"] == error["code"]
    [info] = [d for d in status["details"] if d["@type"].endswith("/google.rpc.ErrorInfo")]
    assert info["domain"] == "ragagent.dev"
    reason: str = info["reason"]
    return reason


async def test_a_key_over_tls_is_served(
    node_client: Path, server: Running, tls: Tls, keys: Keys
) -> None:
    # The key from RAGAGENT_API_KEY, as the `ragagent` client commands take it.
    retrieved = await run_node_client(
        node_client,
        server.target,
        "retrieve",
        QUESTION,
        options=["--tls-ca", str(tls.ca_file)],
        env={"RAGAGENT_API_KEY": keys.asker},
    )
    assert retrieved.returncode == EXIT_OK, retrieved.describe()
    assert retrieved.json()["sources"][0]["document_id"] == "module-01/ros2.md"

    # The key from --api-key, for CorpusService with the role it needs.
    listed = await run_node_client(
        node_client,
        server.target,
        "list-documents",
        options=["--tls-ca", str(tls.ca_file), "--api-key", keys.reader],
        env=NO_KEY_ENV,
    )
    assert listed.returncode == EXIT_OK, listed.describe()
    assert listed.json()["documents"], listed.describe()


async def test_no_key_over_tls_is_unauthenticated(
    node_client: Path, server: Running, tls: Tls
) -> None:
    result = await run_node_client(
        node_client,
        server.target,
        "retrieve",
        QUESTION,
        options=["--tls-ca", str(tls.ca_file)],
        env=NO_KEY_ENV,
    )
    assert _reason(_error(result, UNAUTHENTICATED)) == "UNAUTHENTICATED"

    # The health service stays open without a credential.
    health = await run_node_client(
        node_client, server.target, "health", options=["--tls-ca", str(tls.ca_file)], env=NO_KEY_ENV
    )
    assert health.returncode == EXIT_OK, health.describe()
    assert health.json() == {"status": "SERVING"}


async def test_a_key_without_the_role_is_permission_denied(
    node_client: Path, server: Running, tls: Tls, keys: Keys
) -> None:
    result = await run_node_client(
        node_client,
        server.target,
        "list-documents",
        options=["--tls-ca", str(tls.ca_file), "--api-key", keys.asker],
        env=NO_KEY_ENV,
    )
    assert _reason(_error(result, PERMISSION_DENIED)) == "PERMISSION_DENIED"


async def test_plaintext_does_not_reach_the_tls_port(
    node_client: Path, server: Running, keys: Keys
) -> None:
    # Even with a valid key (sent as a plain header): the handshake never happens.
    for command in ("health", "retrieve"):
        result = await run_node_client(
            node_client,
            server.target,
            command,
            QUESTION if command == "retrieve" else None,
            options=["--api-key", keys.asker],
            env=NO_KEY_ENV,
        )
        error = _error(result, UNAVAILABLE)
        assert "grpc-status-details-bin" not in error["metadata"], result.describe()


@pytest.mark.parametrize("mutual_tls", [True], ids=["mutual-tls"])
async def test_mutual_tls_needs_the_client_certificate(
    node_client: Path, server: Running, tls: Tls, keys: Keys
) -> None:
    ca = ["--tls-ca", str(tls.ca_file)]
    certificate = ["--tls-cert", str(tls.client.cert), "--tls-key", str(tls.client.key)]
    served = await run_node_client(
        node_client,
        server.target,
        "retrieve",
        QUESTION,
        options=[*ca, *certificate, "--api-key", keys.asker],
        env=NO_KEY_ENV,
    )
    assert served.returncode == EXIT_OK, served.describe()
    assert served.json()["sources"][0]["document_id"] == "module-01/ros2.md"

    # Without a certificate the handshake fails, whatever the key.
    refused = await run_node_client(
        node_client,
        server.target,
        "retrieve",
        QUESTION,
        options=[*ca, "--api-key", keys.asker],
        env=NO_KEY_ENV,
    )
    error = _error(refused, UNAVAILABLE)
    assert "grpc-status-details-bin" not in error["metadata"], refused.describe()
