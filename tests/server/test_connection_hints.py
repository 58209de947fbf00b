"""When TLS and plaintext meet, the client commands name the likely cause instead of grpc's
"Socket closed" or an OpenSSL error code. The commands run as a user runs them (processes);
the server is a bare gRPC server with the health service, since the handshake fails before
any service is reached."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
import trustme
from grpc_health.v1 import health, health_pb2_grpc

from tests.processes import REPO, clean_env


@contextmanager
def _server(mode: str, ca: trustme.CA, client_ca: trustme.CA) -> Iterator[int]:
    server = grpc.server(futures.ThreadPoolExecutor(2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    if mode == "plaintext":
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        leaf = ca.issue_cert("localhost", "127.0.0.1")
        credentials = grpc.ssl_server_credentials(
            [(leaf.private_key_pem.bytes(), leaf.cert_chain_pems[0].bytes())],
            root_certificates=client_ca.cert_pem.bytes() if mode == "mutual" else None,
            require_client_auth=mode == "mutual",
        )
        port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        yield port
    finally:
        server.stop(0)


@pytest.mark.parametrize(
    ("mode", "client_tls", "hint"),
    [
        ("tls", False, "the server likely speaks TLS: pass --tls-ca"),
        ("mutual", False, "the server likely speaks TLS: pass --tls-ca"),
        ("plaintext", True, "the server speaks plaintext, not TLS: drop --tls"),
        ("mutual", True, "the server likely requires a client certificate (mutual TLS)"),
    ],
)
@pytest.mark.parametrize("command", ["health", "ask"])
@pytest.mark.slow
def test_the_cli_names_the_likely_cause(
    tmp_path: Path, mode: str, client_tls: bool, hint: str, command: str
) -> None:
    ca, client_ca = trustme.CA(), trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with _server(mode, ca, client_ca) as port:
        argv = [command, "--address", f"127.0.0.1:{port}"]
        argv += ["--tls-ca", str(ca_file)] if client_tls else []
        argv += ["--timeout", "5"] if command == "health" else ["What is URDF?", "--timeout", "5"]
        result = subprocess.run(
            [sys.executable, "-m", "service.cli", *argv],
            cwd=tmp_path,
            env=clean_env(data_dir=str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1, result.stderr
    assert "UNAVAILABLE" in result.stderr
    assert f"ragagent: {hint}" in result.stderr, result.stderr


@pytest.mark.slow
def test_no_hint_when_tls_meets_tls(tmp_path: Path) -> None:
    ca, client_ca = trustme.CA(), trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with _server("tls", ca, client_ca) as port:
        result = subprocess.run(
            [
                *(sys.executable, "-m", "service.cli", "health"),
                *("--address", f"127.0.0.1:{port}", "--tls-ca", str(ca_file)),
            ],
            cwd=REPO,
            env=clean_env(data_dir=str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "SERVING"
    assert "likely" not in result.stderr
