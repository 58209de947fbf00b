"""Small holes a hostile caller found (issue 26, item 6): JWT times written as strings,
request metadata in the log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import structlog

from service.observability.logging import configure_logging
from service.security.tokens import JwtConfig, JwtVerifier, TokenRejected
from tests.security.support import Issuer

ISSUER = "https://issuer.test"


def _verifier(jwks: Path) -> JwtVerifier:
    verifier = JwtVerifier(JwtConfig(issuer=ISSUER, audience="ragagent", jwks_file=jwks))
    verifier.refresh_file()
    return verifier


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
@pytest.mark.parametrize("value", ["9999999999", True, None])
def test_token_times_must_be_numbers(tmp_path: Path, claim: str, value: object) -> None:
    jwks = tmp_path / "jwks.json"
    issuer = Issuer(jwks)
    verifier = _verifier(jwks)
    now = int(time.time())
    assert verifier.verify(issuer.token(sub="alice", nbf=now - 10)).name == "alice"
    with pytest.raises(TokenRejected):
        verifier.verify(issuer.token(sub="alice", **{claim: value}))


def test_request_metadata_is_logged_by_its_keys_only(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("DEBUG", "json")
    capsys.readouterr()
    structlog.get_logger("t").debug("run metadata", metadata={"patient": "Jane Roe, 1961"})
    structlog.get_logger("t").debug("odd", metadata="Jane Roe as a string")
    logged = capsys.readouterr().err
    assert "Jane Roe" not in logged
    assert '"metadata": {"keys": ["patient"]}' in logged
