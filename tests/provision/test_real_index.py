"""`python -m service.provision protos` from an empty cache with this machine's own pip
configuration: the pinned files as the real indexes serve them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from service.provision.index import local_path
from service.provision.pipconfig import read_pip_config, redact
from tests.provision.conftest import ROOT

# Read at import: the suite's autouse fixture removes RAGAGENT_* variables from each test.
ONLINE = os.environ.get("RAGAGENT_PROVISION_ONLINE") == "1"


def _off_this_machine(place: str) -> bool:
    return local_path(place) is None and urlsplit(place).hostname not in ("127.0.0.1", "localhost")


@pytest.mark.slow
def test_protos_from_an_empty_cache_with_this_machines_pip_configuration(tmp_path: Path) -> None:
    config = read_pip_config()
    remote = [redact(p) for p in (*config.index_urls, *config.find_links) if _off_this_machine(p)]
    if remote and not ONLINE:
        pytest.skip(
            f"pip's configuration reaches beyond this machine ({', '.join(remote)}) and the "
            "suite stays off the network (tests/conftest.py); RAGAGENT_PROVISION_ONLINE=1 runs it"
        )
    done = subprocess.run(
        [sys.executable, "-m", "service.provision", "protos", "--dest", str(tmp_path / "protos"),
         "--download-cache", str(tmp_path / "downloads")],
        cwd=ROOT, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")},  # pip's cache too
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0 and "check the network" in done.stderr:
        pytest.skip(f"the index is unreachable: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"provision: protos ready in {tmp_path / 'protos'}"
    validate = (tmp_path / "protos" / "buf" / "validate" / "validate.proto").read_text()
    assert "package buf.validate;" in validate
    for name in ("status", "code", "error_details"):
        rpc = (tmp_path / "protos" / "google" / "rpc" / f"{name}.proto").read_text()
        assert "package google.rpc;" in rpc
