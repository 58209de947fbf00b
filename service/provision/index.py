"""Fetching a file the way pip would find it, for what `pip download` cannot fetch.

The pages are pip's: every find-links entry (a directory, a local page or a URL) and the
project page of every index, in either simple API form; the requests carry pip's Accept
header, certificates, client certificate, proxy, trusted hosts and credentials.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Any

from service.provision.artifacts import Artifact
from service.provision.pipconfig import MISMATCH, NOT_FOUND, UNREACHABLE, PipConfig, redact

# pip's Accept header: the JSON simple API (PEP 691) preferred, the HTML one (PEP 503) accepted.
ACCEPT = (
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, "
    "text/html; q=0.01"
)

Link = tuple[str, str, str | None]  # filename, URL, sha256 when the page gives it
# What a page or a download can fail with: network, TLS, HTTP, bad URL, bad JSON.
FAILURES = (OSError, ValueError, http.client.HTTPException)


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.base: str | None = None
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if href and tag == "a":
            self.hrefs.append(href)
        elif href and tag == "base" and self.base is None:
            self.base = href


def _sha256(entry: dict[str, Any]) -> str | None:
    hashes = entry.get("hashes") or {}
    return hashes.get("sha256") if isinstance(hashes, dict) else None


def parse_links(body: bytes, page_url: str) -> list[Link]:
    """Every file on a simple API page, JSON or HTML, with absolute URLs.

    The body decides the form, not the Content-Type: some indexes label HTML as JSON.
    """
    text = body.decode("utf-8", "replace")
    if text.lstrip().startswith("{"):
        try:
            return [
                (f["filename"], urllib.parse.urljoin(page_url, f["url"]), _sha256(f))
                for f in json.loads(text)["files"]
            ]
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"not a simple API page (no {error})") from error
    anchors = _Anchors()
    anchors.feed(text)
    base = urllib.parse.urljoin(page_url, anchors.base or "")
    links: list[Link] = []
    for href in anchors.hrefs:
        url, _, fragment = urllib.parse.urljoin(base, href).partition("#")
        name = urllib.parse.unquote(PurePosixPath(urllib.parse.urlsplit(url).path).name)
        sha256 = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
        links.append((name, url, sha256))
    return links


def local_path(location: str) -> Path | None:
    """The file or directory a find-links entry or URL names on this machine, if it does."""
    if location.startswith("file:"):
        return Path(urllib.request.url2pathname(urllib.parse.urlsplit(location).path))
    if "://" not in location:
        return Path(location).expanduser()
    return None


def _authorization(url: str, config: PipConfig) -> tuple[str, str | None]:
    """url without credentials, and Basic authorization from the URL itself or, as pip
    does, from an index or find-links URL on the same host (files often live there)."""
    parts = urllib.parse.urlsplit(url)
    for known in map(urllib.parse.urlsplit, (url, *config.index_urls, *config.find_links)):
        if known.username and known.hostname == parts.hostname:
            user = urllib.parse.unquote(known.username)
            secret = urllib.parse.unquote(known.password or "")
            token = base64.b64encode(f"{user}:{secret}".encode()).decode()
            bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
            return bare, f"Basic {token}"
    return url, None


def _ssl_context(url: str, config: PipConfig) -> ssl.SSLContext:
    # pip's `cert` replaces the default CA bundle, except that requests, under pip, lets
    # these variables override it. Any of them may name a directory.
    cert = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or config.cert
    in_dir = cert is not None and os.path.isdir(cert)
    context = ssl.create_default_context(
        cafile=None if in_dir else cert, capath=cert if in_dir else None
    )
    if config.client_cert:  # pip's client-cert: key and certificate in one PEM file
        context.load_cert_chain(config.client_cert)
    parts = urllib.parse.urlsplit(url)
    if {parts.hostname, parts.netloc} & set(config.trusted_hosts):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def get(url: str, config: PipConfig, accept: str = "*/*") -> tuple[bytes, str]:
    """The body of url and the URL it finally came from."""
    local = local_path(url)
    if local is not None:
        if local.is_dir():  # like pip, a file:// index directory stands for its index.html
            local /= "index.html"
        return local.read_bytes(), local.as_uri()
    bare, authorization = _authorization(url, config)
    request = urllib.request.Request(bare, headers={"Accept": accept})  # noqa: S310
    if authorization:  # not repeated to wherever a redirect points
        request.add_unredirected_header("Authorization", authorization)
    # Without pip's `proxy` option urllib takes http(s)_proxy and no_proxy from the
    # environment, as pip does.
    proxies = {"http": config.proxy, "https": config.proxy} if config.proxy else None
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler(proxies),
        urllib.request.HTTPSHandler(context=_ssl_context(bare, config)),
    )
    with opener.open(request, timeout=config.timeout) as response:
        return response.read(), response.geturl()


def _reason(error: Exception) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return f"unreachable ({error.reason})"
    return str(error)


def _candidates(artifact: Artifact, config: PipConfig, problems: list[str]) -> list[Link]:
    """The links to artifact.filename on every page pip would read; failures go to problems."""
    project = re.sub(r"[-_.]+", "-", artifact.project).lower()  # PEP 503 normalised name
    found: list[Link] = []
    pages: list[str] = []
    for link in config.find_links:
        local = local_path(link)
        if local is None or local.suffix in (".html", ".htm"):
            pages.append(link)  # a page of links
            continue
        if local.is_dir():
            local /= artifact.filename  # pip looks at the archives in the directory
        if local.is_file():  # or the archive named directly
            found.append((local.name, local.as_uri(), None))
    # Unlike pip, plain-http pages are read without trusted-host: the pinned checksum, not
    # the transport, is what vouches for the file.
    pages += [f"{url.rstrip('/')}/{project}/" for url in config.index_urls]
    for page in pages:
        try:
            found += parse_links(*get(page, config, ACCEPT))
        except FileNotFoundError as error:
            if local_path(page) is None:  # else a file:// index without that project
                problems.append(f"{redact(page)}: {error}")  # e.g. pip's cert file is missing
        except urllib.error.HTTPError as error:
            if error.code != 404:  # 404: the index does not have that project
                problems.append(f"{redact(page)}: {_reason(error)}")
        except FAILURES as error:
            problems.append(f"{redact(page)}: {_reason(error)}")
    return [link for link in found if link[0] == artifact.filename]


def from_index(artifact: Artifact, config: PipConfig) -> bytes:
    """artifact's file from the first place that has it with the pinned checksum."""
    problems: list[str] = []
    mismatches: list[str] = []
    found = _candidates(artifact, config, problems)
    for _, url, listed in found:
        if listed not in (None, artifact.sha256):  # another file: not worth downloading
            mismatches.append(f"{redact(url)} is listed with sha256 {listed}")
            continue
        try:
            data, _ = get(url, config)
        except FAILURES as error:
            problems.append(f"{redact(url)}: {_reason(error)}")
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest == artifact.sha256:
            return data
        mismatches.append(f"{redact(url)} has sha256 {digest}")
    if mismatches:
        problem = f"checksum mismatch, expected sha256 {artifact.sha256}: {', '.join(mismatches)}"
        raise config.failure(artifact, problem, MISMATCH)
    if problems:
        state = "could not download it" if found else "not found"
        raise config.failure(artifact, f"{state}; {', '.join(problems)}", UNREACHABLE)
    raise config.failure(artifact, "not found", NOT_FOUND)
