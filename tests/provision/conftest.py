"""Small synthetic packages, loopback package indexes and a pip cut off from this machine."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import ssl
import tarfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from service.provision import Artifact

ROOT = Path(__file__).resolve().parents[2]
HTML = "text/html"
JSON = "application/vnd.pypi.simple.v1+json"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wheel(project: str, version: str, files: dict[str, bytes]) -> tuple[str, bytes]:
    """A pure-Python wheel that `pip download` accepts: filename and bytes."""
    dist = project.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
    tags = "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    contents = {**files, f"{info}/METADATA": metadata.encode(), f"{info}/WHEEL": tags.encode()}
    record = []
    for name, data in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    contents[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in contents.items():
            archive.writestr(name, data)
    return f"{dist}-{version}-py3-none-any.whl", buffer.getvalue()


def sdist(project: str, version: str, files: dict[str, bytes]) -> tuple[str, bytes]:
    """A source distribution (only its bytes matter): filename and bytes."""
    base = f"{project.replace('-', '_')}-{version}"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            member = tarfile.TarInfo(f"{base}/{name}")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return f"{base}.tar.gz", buffer.getvalue()


@dataclass(frozen=True)
class Dists:
    """An sdist and a wheel, like the protos pair: artifacts, file bytes, expected output."""

    artifacts: tuple[Artifact, ...]
    files: dict[str, bytes]  # filename -> bytes
    expected: dict[str, bytes]  # path below the target -> content

    def projects(self) -> dict[str, list[str]]:
        """Normalised project name -> its filenames."""
        return {a.project.lower().replace("_", "-"): [a.filename] for a in self.artifacts}


@pytest.fixture(scope="session")
def dists() -> Dists:
    proto = b'syntax = "proto3";\npackage demo;\n'
    model = b"not really a model\n"
    sdist_name, sdist_bytes = sdist("demo-protos", "1.0", {"proto/demo.proto": proto})
    wheel_name, wheel_bytes = wheel("demo-model", "1.0", {"demo_model/model.txt": model})
    proto_member, model_member = "demo_protos-1.0/proto/demo.proto", "demo_model/model.txt"
    return Dists(
        artifacts=(
            # Spelled unnormalised: the index page is /simple/demo-protos/ all the same.
            Artifact(
                "Demo_Protos", sdist_name, sha256(sdist_bytes), {proto_member: "demo/demo.proto"}
            ),
            Artifact("demo-model", wheel_name, sha256(wheel_bytes), {model_member: "model.txt"}),
        ),
        files={sdist_name: sdist_bytes, wheel_name: wheel_bytes},
        expected={"demo/demo.proto": proto, "model.txt": model},
    )


def html_page(
    filenames: list[str], files: dict[str, bytes], prefix: str = "../../files/", hashes: bool = True
) -> bytes:
    anchors = "".join(
        f'<a href="{prefix}{name}{f"#sha256={sha256(files[name])}" if hashes else ""}">{name}</a>\n'
        for name in filenames
    )
    return f"<!DOCTYPE html><html><body>\n{anchors}</body></html>\n".encode()


def json_page(project: str, filenames: list[str], files: dict[str, bytes]) -> bytes:
    entries = [
        {"filename": name, "url": f"../../files/{name}", "hashes": {"sha256": sha256(files[name])}}
        for name in filenames
    ]
    return json.dumps({"meta": {"api-version": "1.1"}, "name": project, "files": entries}).encode()


Routes = dict[str, tuple[str, bytes]]  # path -> (content type, body)


def index_routes(
    projects: dict[str, list[str]], files: dict[str, bytes], form: str = HTML
) -> Routes:
    """A simple API under /simple/ with the files under /files/, in one form only."""
    routes: Routes = {
        f"/files/{name}": ("application/octet-stream", data) for name, data in files.items()
    }
    for project, filenames in projects.items():
        page = html_page(filenames, files) if form == HTML else json_page(project, filenames, files)
        routes[f"/simple/{project}/"] = (form, page)
    return routes


@dataclass
class Served:
    url: str  # scheme://127.0.0.1:port
    requests: list[tuple[str, str]] = field(default_factory=list)  # (request target, Accept)

    def paths(self) -> list[str]:
        return [urlsplit(target).path for target, _ in self.requests]


@contextmanager
def serve(routes: Routes, tls: ssl.SSLContext | None = None) -> Iterator[Served]:
    """Serves routes on 127.0.0.1 whatever the Accept header; also answers as an HTTP proxy
    (absolute-form targets are looked up by their path)."""
    served = Served("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.requests.append((self.path, self.headers.get("Accept", "")))
            route = routes.get(urlsplit(self.path).path)
            if route is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", route[0])
            self.send_header("Content-Length", str(len(route[1])))
            self.end_headers()
            self.wfile.write(route[1])

        def log_message(self, format: str, *args: object) -> None:
            pass  # keep pytest's output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    served.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def pip_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., None]:
    """Cuts pip off from this machine's configuration; returns a setter for PIP_* variables."""
    for var in list(os.environ):
        if var.startswith("PIP_") or var.lower().endswith("_proxy") or var.endswith("_CA_BUNDLE"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("PIP_RETRIES", "0")  # an unreachable index fails at once
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "20")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))

    def set_pip(**options: str) -> None:
        for name, value in options.items():
            monkeypatch.setenv(f"PIP_{name.upper()}", value)

    return set_pip
