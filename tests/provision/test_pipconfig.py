"""pip's effective configuration for `pip download`, read from pip itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from service.provision.pipconfig import DEFAULT_INDEX, effective_config, read_pip_config

SetPip = Callable[..., None]


def test_environment_beats_download_section_beats_global() -> None:
    config = effective_config({
        "global.index-url": "https://global.example/simple",
        "global.extra-index-url": "https://extra1.example/simple\nhttps://extra2.example/simple",
        "download.index-url": "https://download.example/simple",
        "install.index-url": "https://install-only.example/simple",
        "global.find-links": "/from/global",
        ":env:.find-links": "/wheels/a /wheels/b",
        "global.cert": "/etc/ca.pem",
        ":env:.cert": "",  # an empty variable does not unset it, as in pip
        "download.proxy": "http://proxy.example:3128",
        "global.trusted-host": "a.example b.example:8443",
        ":env:.default-timeout": "42",
    })  # fmt: skip
    assert config.index_urls == (
        "https://download.example/simple",
        "https://extra1.example/simple",
        "https://extra2.example/simple",
    )
    assert config.find_links == ("/wheels/a", "/wheels/b")
    assert config.cert == "/etc/ca.pem"
    assert config.proxy == "http://proxy.example:3128"
    assert config.trusted_hosts == ("a.example", "b.example:8443")
    assert config.timeout == 42.0


def test_no_index_leaves_only_find_links() -> None:
    config = effective_config({":env:.no-index": "yes", "global.find-links": "/wheels"})
    assert config.index_urls == ()
    assert config.places() == "find-links /wheels"
    assert effective_config({}).index_urls == (DEFAULT_INDEX,)


def test_read_from_pip_with_its_precedence_across_files(
    pip_env: SetPip, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pip lists the two index-url lines by file path, the user's file first here, yet the
    # user's file beats the machine-wide one.
    user, machine = tmp_path / "a-user" / "pip", tmp_path / "z-machine" / "pip"
    user.mkdir(parents=True)
    machine.mkdir(parents=True)
    (user / "pip.conf").write_text(
        "[global]\nindex-url = https://user.example/simple\n"
        "[download]\nextra-index-url =\n    https://one.example/simple\n    https://two.example/simple\n"
        "[install]\nindex-url = https://install-only.example/simple\n"
    )
    (machine / "pip.conf").write_text(
        "[global]\nindex-url = https://machine.example/simple\nfind-links = /from/machine\n"
    )
    monkeypatch.delenv("PIP_CONFIG_FILE")  # else pip would skip the user's file
    monkeypatch.setenv("XDG_CONFIG_HOME", str(user.parent))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(machine.parent))
    monkeypatch.setenv("HOME", str(tmp_path))
    pip_env(find_links="/from/env")
    config = read_pip_config()
    assert config.index_urls == (
        "https://user.example/simple",
        "https://one.example/simple",
        "https://two.example/simple",
    )
    assert config.find_links == ("/from/env",)
