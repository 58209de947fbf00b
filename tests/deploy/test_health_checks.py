"""The health checks of every shipped deployment, run against ``ragagent serve`` configured the
strictest way the deployment files allow: TLS, mutual TLS and API keys on the main port, the
plaintext health-only listener (RAGAGENT_HEALTH_ADDRESS) beside it.

Each check is run as the deployment file spells it: the Dockerfile's HEALTHCHECK and
compose's healthcheck through /bin/sh with grpcurl (only the port is moved to a free one);
the Kubernetes probes and Envoy's health check as their callers make them (a plaintext
grpc.health.v1 Check, no client certificate). They answer SERVING; against the TLS port the
same commands fail, which is why the health port exists."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.processes import REPO, ServerProcess, free_port
from tests.security.support import client_cert, new_key, server_cert

pytestmark = pytest.mark.slow

DEPLOY = REPO / "deploy"
GRPCURL = str(REPO / ".venv" / "bin" / "grpcurl")


def _dockerfile_healthcheck() -> str:
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    match = re.search(r"^HEALTHCHECK .*?CMD (\[.*\])$", text, re.MULTILINE)
    assert match is not None
    argv = json.loads(match.group(1))
    assert argv[:2] == ["/bin/sh", "-c"]
    return str(argv[2])


def _compose_healthcheck() -> str:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    test = compose["services"]["ragagent"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "/bin/sh", "-c"]
    return str(test[3])


def _image_env(name: str) -> str:
    found = re.search(rf"\b{name}=(\S+)", (REPO / "Dockerfile").read_text())
    assert found is not None, name
    return found.group(1)


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def _check_plaintext(target: str, service: str = "") -> str:
    with grpc.insecure_channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=5
            )
        except grpc.RpcError as error:
            return str(error.code().name)  # type: ignore[attr-defined]
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, int]]:
    folder = tmp_path_factory.mktemp("strict")
    ca, client_ca = trustme.CA(), trustme.CA()
    cert = server_cert(ca, folder)
    client_ca_file = folder / "client-ca.pem"
    client_ca.cert_pem.write_to_path(str(client_ca_file))
    client_cert(client_ca, folder, uri="spiffe://example.org/probe")
    keys = folder / "keys.jsonl"
    new_key(keys, "web", "ask")
    health_port = free_port()
    process = ServerProcess.launch(
        folder,
        tls_cert_file=str(cert.cert),
        tls_key_file=str(cert.key),
        tls_client_ca_file=str(client_ca_file),
        api_keys_file=str(keys),
        health_address=f"127.0.0.1:{health_port}",
        log_format="json",
    )
    try:
        deadline = time.monotonic() + 90
        while _check_plaintext(f"127.0.0.1:{health_port}") != "SERVING":
            if not process.alive():
                raise RuntimeError(process.describe_death())
            assert time.monotonic() < deadline, process.log_tail()
            time.sleep(0.2)
        yield process, health_port
    finally:
        assert process.stop() == 0, process.log_tail()


def _run_shell(command: str, image_port: int, port: int) -> subprocess.CompletedProcess[str]:
    # The deployment's own command, with grpcurl from this venv and the free port.
    assert f"127.0.0.1:{image_port} " in command
    local = command.replace("grpcurl ", f"{GRPCURL} ", 1).replace(
        f"127.0.0.1:{image_port} ", f"127.0.0.1:{port} "
    )
    return subprocess.run(
        ["/bin/sh", "-c", local], capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.parametrize("source", ["Dockerfile", "compose.yaml"])
def test_the_container_health_command_passes_against_a_mutual_tls_server(
    server: tuple[ServerProcess, int], source: str
) -> None:
    process, health_port = server
    if source == "Dockerfile":
        command, configured = _dockerfile_healthcheck(), _image_env("RAGAGENT_HEALTH_ADDRESS")
    else:
        command = _compose_healthcheck()
        compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
        configured = compose["services"]["ragagent"]["environment"]["RAGAGENT_HEALTH_ADDRESS"]
    image_port = _port(configured)
    assert _run_shell(command, image_port, health_port).returncode == 0
    # The same command against the TLS port fails: plaintext cannot pass a TLS handshake.
    assert _run_shell(command, image_port, process.port).returncode != 0


def test_the_kubernetes_probes_target_the_plaintext_health_port(
    server: tuple[ServerProcess, int],
) -> None:
    _, health_port = server
    deployment = yaml.safe_load((DEPLOY / "kubernetes" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    config = yaml.safe_load((DEPLOY / "kubernetes" / "configmap.yaml").read_text())["data"]
    configured = _port(config["RAGAGENT_HEALTH_ADDRESS"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == configured != ports["grpc"]
    for name in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe: dict[str, Any] = container[name]["grpc"]
        assert probe["port"] == configured
        # The kubelet's grpc probe: plaintext Health/Check for the probe's service name.
        status = _check_plaintext(f"127.0.0.1:{health_port}", probe.get("service", ""))
        assert status == "SERVING"


def test_the_health_port_answers_health_and_nothing_else(
    server: tuple[ServerProcess, int],
) -> None:
    _, health_port = server
    target = f"127.0.0.1:{health_port}"
    assert _check_plaintext(target, "ragagent.v1.AgentService") == "SERVING"
    listed = subprocess.run(
        [GRPCURL, "-plaintext", target, "list"], capture_output=True, text=True, check=False
    )
    # Reflection (which grpcurl needs) lists the health service alone.
    assert sorted(listed.stdout.split()) == [
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    ], listed.stderr
    stats = subprocess.run(
        [GRPCURL, "-plaintext", target, "ragagent.v1.CorpusService/GetCorpusStats"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert stats.returncode != 0


def test_the_health_port_turns_not_serving_when_the_server_drains(tmp_path: Path) -> None:
    health_port = free_port()
    process = ServerProcess.launch(tmp_path, health_address=f"127.0.0.1:{health_port}")
    process.wait_ready()
    target = f"127.0.0.1:{health_port}"
    with grpc.insecure_channel(target) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(), timeout=60
        )
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        process.process.send_signal(15)
        statuses = []
        try:
            for reply in watch:
                statuses.append(reply.status)
        except grpc.RpcError:
            pass  # the listener closes once the main server has drained
    assert health_pb2.HealthCheckResponse.NOT_SERVING in statuses
    # Waited for, not stopped again: a second SIGTERM during the drain would end it hard.
    assert process.process.wait(60) == 0
