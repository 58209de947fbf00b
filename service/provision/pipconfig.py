"""pip's effective configuration for `pip download`, as pip itself reports it.

pip merges its config files (global, user, site, PIP_CONFIG_FILE) and PIP_* variables;
asking pip (`pip config list`) rather than re-reading those files keeps every rule of its
own: file locations per platform, isolated mode, PIP_CONFIG_FILE=os.devnull and so on.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass

from service.provision.artifacts import Artifact, ProvisionError

DEFAULT_INDEX = "https://pypi.org/simple"
# Sections that apply to `pip download`, weakest first.
SECTIONS = ("global", "download", ":env:")
TRUE = {"1", "y", "yes", "t", "true", "on"}  # pip's strtobool

NOT_FOUND = (
    "make pip's index-url/extra-index-url/find-links reach it "
    "(see `pip config list`, PIP_INDEX_URL, PIP_FIND_LINKS)"
)
UNREACHABLE = (
    "check the network, proxy and certificates, or point pip at a reachable index (PIP_INDEX_URL)"
)
MISMATCH = (
    "refusing it: a published file never changes, so that index serves something else "
    "than the pinned release"
)


def redact(url: str) -> str:
    """url with its password masked, as pip prints it."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username}:****@{host}").geturl()


@dataclass(frozen=True)
class PipConfig:
    """The options of `pip download` that decide where and how packages are fetched."""

    index_urls: tuple[str, ...] = (DEFAULT_INDEX,)  # empty under no-index
    find_links: tuple[str, ...] = ()
    cert: str | None = None
    client_cert: str | None = None
    proxy: str | None = None
    trusted_hosts: tuple[str, ...] = ()
    timeout: float = 15.0

    def places(self) -> str:
        """Where packages are looked for, passwords masked."""
        places = [redact(url) for url in self.index_urls]
        places += [f"find-links {redact(link)}" for link in self.find_links]
        return ", ".join(places) or "nowhere (no-index without find-links)"

    def failure(self, artifact: Artifact, problem: str, advice: str) -> ProvisionError:
        return ProvisionError(
            f"cannot get {artifact.filename} ({artifact.project}): {problem}; "
            f"looked in {self.places()}; {advice}"
        )


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs this interpreter's pip, output captured."""
    return subprocess.run(  # noqa: S603 (our own interpreter's pip)
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False
    )


def last_error(output: str) -> str:
    """pip's last ERROR line, else its last line: what a one-line summary needs."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["no output"])[-1]


def pip_settings() -> dict[str, str]:
    """pip's configuration: ``section.key`` -> value, sections global, download, :env: ..."""
    listed = pip("config", "list")
    if listed.returncode != 0:
        raise ProvisionError(
            f"`pip config list` failed: {last_error(listed.stderr)}; "
            f"pip must work for {sys.executable} (python -m ensurepip)"
        )
    settings: dict[str, str] = {}
    for line in listed.stdout.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key in settings:
            # Set in several files: the listing goes file by file, sorted by path rather
            # than by precedence, while `pip config get` applies pip's precedence.
            settings[key] = pip("config", "get", key).stdout.rstrip("\n")
        else:
            settings[key] = str(ast.literal_eval(value))  # pip prints values with %r
    return settings


def effective_config(settings: dict[str, str]) -> PipConfig:
    """The options `pip download` ends up with: PIP_* variables over [download] over [global]."""
    options: dict[str, str] = {}
    for wanted in SECTIONS:
        for key, value in settings.items():
            section, _, name = key.partition(".")
            if section == wanted and value:  # pip skips empty values
                options[name] = value
    timeout = options.get("timeout") or options.get("default-timeout") or "15"
    if not re.fullmatch(r"\d+(\.\d*)?", timeout):
        raise ProvisionError(f"pip's timeout {timeout!r} is not a number of seconds")
    indexes = (options.get("index-url", DEFAULT_INDEX), *options.get("extra-index-url", "").split())
    return PipConfig(
        index_urls=() if options.get("no-index", "").lower() in TRUE else indexes,
        find_links=tuple(options.get("find-links", "").split()),
        cert=options.get("cert"),
        client_cert=options.get("client-cert"),
        proxy=options.get("proxy"),
        trusted_hosts=tuple(options.get("trusted-host", "").split()),
        timeout=float(timeout),
    )


def read_pip_config() -> PipConfig:
    """pip's effective configuration on this machine, for this environment."""
    return effective_config(pip_settings())
