"""Every shipped deployment is secure as shipped: TLS and authentication on, no placeholder
secret an apply would reset, no fixed replica count beside the autoscaler, only loopback
ports on the compose host, third-party images pinned by digest.

The Kubernetes manifests are rendered with ``kubectl kustomize`` (what ``kubectl apply -k``
applies) when kubectl is installed, else assembled from kustomization.yaml's resources. The
compose stack cannot run here (no Docker engine on the development or CI machines), so its
file is parsed and its one piece of code, scripts/dev-secrets.py, runs for real: the
certificates and key it makes serve a ``ragagent serve`` configured as compose configures the
replicas, and a client that verifies them as Envoy and a caller do gets through with the key
and UNAUTHENTICATED without it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc

from service.config import Settings
from service.observability.metrics import Metrics
from service.security.apikeys import PREFIX
from tests.processes import REPO, ServerProcess, clean_env, free_port

DEPLOY = REPO / "deploy"
KUBE = DEPLOY / "kubernetes"
DIGEST = re.compile(r"^[\w./-]+(:[\w.-]+)?@sha256:[0-9a-f]{64}$")


def _rendered() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is not None:
        out = subprocess.run(
            [kubectl, "kustomize", str(KUBE)], capture_output=True, text=True, check=True
        ).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]
    listed = yaml.safe_load((KUBE / "kustomization.yaml").read_text())["resources"]
    return [doc for name in listed for doc in yaml.safe_load_all((KUBE / name).read_text())]


RENDERED = _rendered()


def _one(kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in RENDERED if doc["kind"] == kind]
    return found


def _settings(env: dict[str, str]) -> Settings:
    fields = {k.removeprefix("RAGAGENT_").lower(): v for k, v in env.items() if "RAGAGENT_" in k}
    return Settings(_env_file=None, **fields)  # type: ignore[call-arg]


def _container() -> dict[str, Any]:
    (container,) = _one("Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def test_kubernetes_applies_no_secret_so_it_never_resets_the_operators() -> None:
    assert "Secret" not in {doc["kind"] for doc in RENDERED}
    text = yaml.safe_dump_all(RENDERED)
    assert "CHANGE-ME" not in text
    assert not re.search(r"(?i)password|api_key\"?:", text)
    # The pods read the three Secrets the operator creates (kustomization.yaml says how).
    container = _container()
    secret_refs = [s["secretRef"]["name"] for s in container["envFrom"] if "secretRef" in s]
    volumes = _one("Deployment")["spec"]["template"]["spec"]["volumes"]
    mounted = {v["secret"]["secretName"] for v in volumes if "secret" in v}
    assert secret_refs == ["ragagent"]
    assert mounted == {"ragagent-tls", "ragagent-api-keys"}
    howto = (KUBE / "kustomization.yaml").read_text()
    for name in ("tls ragagent-tls", "generic ragagent-api-keys", "generic ragagent "):
        assert f"kubectl create secret {name}" in howto


def test_kubernetes_turns_on_tls_and_api_keys_from_the_mounted_secrets() -> None:
    config = _one("ConfigMap")["data"]
    settings = _settings(config)
    assert settings.authentication_configured
    assert settings.tls_cert_file is not None
    assert settings.tls_key_file is not None
    assert settings.api_keys_file is not None
    mounts = {m["mountPath"]: m["name"] for m in _container()["volumeMounts"]}
    volumes = {
        v["name"]: v["secret"]["secretName"]
        for v in _one("Deployment")["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    }
    for path, secret in (
        (settings.tls_cert_file, "ragagent-tls"),
        (settings.tls_key_file, "ragagent-tls"),
        (settings.api_keys_file, "ragagent-api-keys"),
    ):
        assert volumes[mounts[str(path.parent)]] == secret, path
    # Whole directories, not subPath: rotated files reach the pod.
    assert not any("subPath" in m for m in _container()["volumeMounts"])


def test_kubernetes_probes_hit_the_listener_that_answers_without_tls() -> None:
    config = _one("ConfigMap")["data"]
    health = int(config["RAGAGENT_HEALTH_ADDRESS"].rpartition(":")[2])
    main = int(config["RAGAGENT_ADDRESS"].rpartition(":")[2])
    ports = {p["name"]: p["containerPort"] for p in _container()["ports"]}
    assert ports == {"grpc": main, "health": health, "metrics": 9464}
    assert health != main
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert _container()[probe]["grpc"]["port"] == health
    # The Service does not claim plaintext HTTP/2 on the TLS port, nor expose the health port.
    service_ports = _one("Service")["spec"]["ports"]
    assert {p["name"] for p in service_ports} == {"grpc", "metrics"}
    assert all(p.get("appProtocol") != "kubernetes.io/h2c" for p in service_ports)


def test_kubernetes_has_no_replicas_beside_the_hpa_which_scales_on_open_streams() -> None:
    deployment = _one("Deployment")
    assert "replicas" not in deployment["spec"]
    hpa = _one("HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert 1 < hpa["minReplicas"] < hpa["maxReplicas"]
    first, *rest = hpa["metrics"]
    assert first["type"] == "Pods"
    assert first["pods"]["metric"]["name"] == "ragagent_active_streams"
    assert first["pods"]["target"]["type"] == "AverageValue"
    assert [m["resource"]["name"] for m in rest if m["type"] == "Resource"] == ["cpu"]
    exported = {family.name for family in Metrics().registry.collect()}
    assert "ragagent_active_streams" in exported
    adapter = yaml.safe_load((KUBE / "metrics" / "prometheus-adapter-rules.yaml").read_text())
    (rule,) = adapter["rules"]["custom"]
    assert rule["name"]["as"] == "ragagent_active_streams"
    assert "ragagent_active_streams" in rule["seriesQuery"]
    assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}


def test_kubernetes_network_policy_admits_only_callers_and_the_scraper() -> None:
    policy = _one("NetworkPolicy")["spec"]
    labels = _one("Deployment")["spec"]["selector"]["matchLabels"]
    assert policy["podSelector"]["matchLabels"] == labels
    assert policy["policyTypes"] == ["Ingress"]
    admitted = {
        next(iter(rule["from"][0]["namespaceSelector"]["matchLabels"])): [
            p["port"] for p in rule["ports"]
        ]
        for rule in policy["ingress"]
    }
    assert admitted == {"ragagent.io/client": ["grpc"], "ragagent.io/scraper": ["metrics"]}


COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]


def test_compose_publishes_ports_on_loopback_only() -> None:
    published = [(name, port) for name, svc in SERVICES.items() for port in svc.get("ports", [])]
    assert published  # Envoy, Prometheus and Grafana
    for name, port in published:
        assert isinstance(port, str), (name, port)
        assert port.startswith("127.0.0.1:"), (name, port)


def test_compose_builds_ragagent_and_pins_every_other_image_by_digest() -> None:
    for name, service in SERVICES.items():
        if "build" in service:
            assert service["image"].startswith("ragagent:"), name
            build = service["build"]
            assert (DEPLOY / build["context"] / build["dockerfile"]).is_file()
        else:
            assert DIGEST.match(service["image"]), (name, service["image"])
    assert "build" in SERVICES["ragagent"]


def test_compose_turns_on_tls_and_api_keys_with_no_default_passwords() -> None:
    environment = SERVICES["ragagent"]["environment"]
    settings = _settings(environment)
    assert settings.tls_cert_file is not None
    assert settings.tls_key_file is not None
    assert settings.api_keys_file is not None
    assert settings.authentication_configured
    secrets_mount = "secrets:/secrets:ro"
    assert secrets_mount in SERVICES["ragagent"]["volumes"]
    for path in (settings.tls_cert_file, settings.tls_key_file, settings.api_keys_file):
        assert str(path).startswith("/secrets/")
    # Made before any replica starts, by the script this test runs below.
    assert SERVICES["ragagent"]["depends_on"]["dev-secrets"] == {
        "condition": "service_completed_successfully"
    }
    assert "../scripts/dev-secrets.py:/opt/dev-secrets.py:ro" in SERVICES["dev-secrets"]["volumes"]
    # Passwords must be given: compose refuses to start without them.
    assert ":?" in SERVICES["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert ":?" in environment["RAGAGENT_DATABASE_URL"]
    grafana = SERVICES["grafana"]["environment"]
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert ":?" in grafana["GF_SECURITY_ADMIN_PASSWORD"]
    # Envoy: TLS towards clients and towards the replicas, verifying their certificate.
    envoy = yaml.safe_load((DEPLOY / "envoy.yaml").read_text())["static_resources"]
    (listener,) = envoy["listeners"]
    (chain,) = listener["filter_chains"]
    downstream = chain["transport_socket"]["typed_config"]["common_tls_context"]
    assert downstream["tls_certificates"][0]["private_key"]["filename"] == "/secrets/envoy.key"
    (cluster,) = envoy["clusters"]
    upstream = cluster["transport_socket"]["typed_config"]
    assert upstream["common_tls_context"]["validation_context"]["trusted_ca"] == {
        "filename": "/secrets/ca.pem"
    }
    assert upstream["sni"] == "ragagent"


@pytest.mark.slow
def test_the_dev_secrets_of_compose_serve_tls_and_refuse_callers_without_the_key(
    tmp_path: Path,
) -> None:
    secrets = tmp_path / "secrets"
    made = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "dev-secrets.py"), str(secrets)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    key = next(line for line in made.stdout.splitlines() if line.startswith(f"{PREFIX}_"))
    assert key not in (secrets / "keys.jsonl").read_text()  # only its hash is stored
    again = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "dev-secrets.py"), str(secrets)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "nothing changed" in again.stdout
    environment = {
        k.removeprefix("RAGAGENT_").lower(): v.replace("/secrets/", f"{secrets}/")
        for k, v in SERVICES["ragagent"]["environment"].items()
        if k.startswith("RAGAGENT_")
        and k.removeprefix("RAGAGENT_") in ("TLS_CERT_FILE", "TLS_KEY_FILE", "API_KEYS_FILE")
    }
    health_port = free_port()
    process = ServerProcess.launch(
        tmp_path / "server", health_address=f"127.0.0.1:{health_port}", **environment
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{health_port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=90, wait_for_ready=True
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        # As Envoy dials a replica: TLS, the dev CA, the name `ragagent`.
        credentials = grpc.ssl_channel_credentials((secrets / "ca.pem").read_bytes())
        options = (("grpc.ssl_target_name_override", "ragagent"),)
        with grpc.secure_channel(process.target, credentials, options) as channel:
            stub = corpus_pb2_grpc.CorpusServiceStub(channel)
            request = corpus_pb2.GetCorpusStatsRequest()
            with pytest.raises(grpc.RpcError) as refused:
                stub.GetCorpusStats(request, timeout=30)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
            stub.GetCorpusStats(request, timeout=30, metadata=(("authorization", f"Bearer {key}"),))
    finally:
        assert process.stop() == 0, process.log_tail()
