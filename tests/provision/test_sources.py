"""Provisioning from an empty cache from every kind of place pip can be pointed at."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from service.provision import provision
from service.provision.index import ACCEPT
from tests.provision.conftest import HTML, JSON, Dists, html_page, index_routes, serve

SetPip = Callable[..., None]


def _assert_provisioned(dists: Dists, target: Path, cache: Path) -> None:
    for path, content in dists.expected.items():
        assert (target / path).read_bytes() == content
    assert (target / ".provisioned.json").is_file()
    assert sorted(p.name for p in cache.iterdir()) == sorted(dists.files)


def test_html_only_index_on_loopback(dists: Dists, pip_env: SetPip, tmp_path: Path) -> None:
    routes = index_routes(dists.projects(), dists.files, HTML)
    with serve(routes) as index:
        pip_env(index_url=f"{index.url}/simple")
        assert provision(dists.artifacts, tmp_path / "out", tmp_path / "cache")
    _assert_provisioned(dists, tmp_path / "out", tmp_path / "cache")
    # pip fetched the wheel, the sdist came from the page pip would read, asked like pip asks.
    assert "/files/demo_model-1.0-py3-none-any.whl" in index.paths()
    assert "/files/demo_protos-1.0.tar.gz" in index.paths()
    assert ("/simple/demo-protos/", ACCEPT) in index.requests
    assert ACCEPT.startswith(JSON)

    # The index is gone: a second target is filled from the download cache alone.
    assert provision(dists.artifacts, tmp_path / "again", tmp_path / "cache")
    _assert_provisioned(dists, tmp_path / "again", tmp_path / "cache")
    assert not provision(dists.artifacts, tmp_path / "again", tmp_path / "cache")


def test_json_index_with_relative_urls(dists: Dists, pip_env: SetPip, tmp_path: Path) -> None:
    with serve(index_routes(dists.projects(), dists.files, JSON)) as index:
        pip_env(index_url=f"{index.url}/simple")
        assert provision(dists.artifacts, tmp_path / "out", tmp_path / "cache")
    _assert_provisioned(dists, tmp_path / "out", tmp_path / "cache")


def test_html_labelled_as_json_is_read_by_its_body(
    dists: Dists, pip_env: SetPip, tmp_path: Path
) -> None:
    # As pypi.org sometimes answers. Only the sdist: pip itself trusts the header.
    routes = index_routes(dists.projects(), dists.files, HTML)
    routes = {
        path: (JSON if path.startswith("/simple/") else kind, body)
        for path, (kind, body) in routes.items()
    }
    with serve(routes) as index:
        pip_env(index_url=f"{index.url}/simple")
        assert provision(dists.artifacts[:1], tmp_path / "out", tmp_path / "cache")
    assert (tmp_path / "out" / "demo/demo.proto").read_bytes() == dists.expected["demo/demo.proto"]


@pytest.mark.parametrize("form", ["directory", "html page"])
def test_find_links_without_index(dists: Dists, pip_env: SetPip, tmp_path: Path, form: str) -> None:
    folder = tmp_path / "wheelhouse"
    (folder / "files").mkdir(parents=True)
    for name, data in dists.files.items():
        (folder / "files" / name).write_bytes(data)
    if form == "directory":
        link = str(folder / "files")
    else:
        (folder / "links.html").write_bytes(html_page(sorted(dists.files), dists.files, "files/"))
        link = str(folder / "links.html")
    pip_env(no_index="1", find_links=link, index_url="http://127.0.0.1:9/never-used")
    assert provision(dists.artifacts, tmp_path / "out", tmp_path / "cache")
    _assert_provisioned(dists, tmp_path / "out", tmp_path / "cache")


def test_file_index_with_index_html_per_project(
    dists: Dists, pip_env: SetPip, tmp_path: Path
) -> None:
    # The layout of a simple index on disk, e.g. file:///opt/pypi/simple.
    for path, (_, body) in index_routes(dists.projects(), dists.files, HTML).items():
        dest = tmp_path / "mirror" / path.strip("/")
        if path.endswith("/"):
            dest /= "index.html"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(body)
    # An extra index, after one that has nothing: both are looked in.
    pip_env(
        index_url=(tmp_path / "empty").as_uri(),
        extra_index_url=(tmp_path / "mirror" / "simple").as_uri(),
    )
    assert provision(dists.artifacts, tmp_path / "out", tmp_path / "cache")
    _assert_provisioned(dists, tmp_path / "out", tmp_path / "cache")


def test_through_pips_proxy_option(dists: Dists, pip_env: SetPip, tmp_path: Path) -> None:
    # The loopback server plays the proxy; the index host exists nowhere else.
    with serve(index_routes(dists.projects(), dists.files, HTML)) as proxy:
        pip_env(
            index_url="http://index.invalid/simple",
            proxy=proxy.url,
            trusted_host="index.invalid",  # pip refuses plain http to other hosts otherwise
        )
        assert provision(dists.artifacts, tmp_path / "out", tmp_path / "cache")
    _assert_provisioned(dists, tmp_path / "out", tmp_path / "cache")
    targets = [target for target, _ in proxy.requests]
    assert "http://index.invalid/simple/demo-protos/" in targets
    assert "http://index.invalid/files/demo_model-1.0-py3-none-any.whl" in targets


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A private CA and a server certificate for 127.0.0.1 it signed: (CA, cert, key)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make certificates")
    folder = tmp_path_factory.mktemp("tls")
    ca, ca_key, cert, key = (folder / name for name in ("ca.pem", "ca.key", "cert.pem", "key.pem"))
    extensions = folder / "server.cnf"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    for command in (
        f"req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca -keyout {ca_key} -out {ca}"
        " -addext keyUsage=critical,keyCertSign,cRLSign",
        f"req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout {key} -out {folder}/csr.pem",
        f"x509 -req -in {folder}/csr.pem -CA {ca} -CAkey {ca_key} -CAcreateserial -days 1"
        f" -extfile {extensions} -out {cert}",
    ):
        subprocess.run(["openssl", *command.split()], check=True, capture_output=True)
    return ca, cert, key


@pytest.mark.parametrize("trust", ["cert", "trusted-host"])
def test_https_index_with_pips_certificate_settings(
    dists: Dists,
    pip_env: SetPip,
    tmp_path: Path,
    certificate: tuple[Path, Path, Path],
    trust: str,
) -> None:
    ca, cert, key = certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with serve(index_routes(dists.projects(), dists.files, HTML), tls) as index:
        pip_env(index_url=f"{index.url}/simple")
        if trust == "cert":
            pip_env(cert=str(ca))
        else:
            pip_env(trusted_host=index.url.removeprefix("https://"))
        assert provision(dists.artifacts, tmp_path / "out", tmp_path / "cache")
    _assert_provisioned(dists, tmp_path / "out", tmp_path / "cache")
