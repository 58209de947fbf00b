"""The client commands' one channel helper: flags or their environment variables, TLS, and
the bearer credential on every call shape."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from service.commands.channel import Connection, add_connection_flags, connection, open_channel
from service.errors import ConfigurationError
from tests.helpers import running_server
from tests.security.support import EVERY_RPC, new_key, outcome


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_connection_flags(parser)
    return parser.parse_args(argv)


def test_flags_win_over_the_environment_which_fills_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGAGENT_API_KEY", "from-env")
    monkeypatch.setenv("RAGAGENT_CLIENT_TLS_CA", "/env/ca.pem")
    plain = connection(_args(), "0.0.0.0:50051")
    assert plain.target == "127.0.0.1:50051"
    assert plain.api_key == "from-env"
    assert plain.tls
    assert plain.ca == Path("/env/ca.pem")
    flagged = connection(_args("--api-key", "typed", "--tls-ca", "/x.pem"), "h:1")
    assert (flagged.api_key, flagged.ca) == ("typed", Path("/x.pem"))


def test_no_flags_and_no_environment_is_plaintext_without_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("RAGAGENT_API_KEY", "RAGAGENT_CLIENT_TLS", "RAGAGENT_CLIENT_TLS_CA"):
        monkeypatch.delenv(name, raising=False)
    assert connection(_args(), "127.0.0.1:1") == Connection(target="127.0.0.1:1")


def test_a_client_certificate_needs_its_key() -> None:
    with pytest.raises(ConfigurationError, match="--tls-key"):
        connection(_args("--tls-cert", "c.pem"), "127.0.0.1:1")


async def test_the_credential_goes_with_every_call_shape(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    _, key = new_key(keys, "all", "admin")
    async with (
        running_server(tmp_path / "data", api_keys_file=keys) as srv,
        open_channel(Connection(target=srv.target, api_key=key)) as channel,
    ):
        shapes = {
            name: await outcome(EVERY_RPC[name][1], channel, ())
            for name in ("Ask", "AskStream", "IngestDocuments", "GetCorpusStats")
        }
    assert shapes == dict.fromkeys(shapes, "OK")
