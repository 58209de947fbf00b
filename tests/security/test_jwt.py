"""JWTs signed by a test issuer: the good one passes with its roles; an expired one, one for
another audience or from another issuer, one signed by another key, ``alg: none`` and an
HMAC token keyed with the public JWKS are all UNAUTHENTICATED/CREDENTIALS_INVALID."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from service.observability.logging import configure_logging
from service.security.tokens import JwtConfig, JwtVerifier, TokenRejected
from tests.helpers import running_server
from tests.security.support import EVERY_RPC, Issuer, bearer, outcome

ISSUER = "https://issuer.test"
INVALID = "UNAUTHENTICATED/CREDENTIALS_INVALID"


async def test_tokens_from_the_issuer_pass_and_every_forgery_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jwks = tmp_path / "jwks.json"
    issuer = Issuer(jwks)
    now = int(time.time())
    public_pem = issuer.key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    tokens = {
        "good": issuer.token(sub="alice", roles=["ask"]),
        "roles as a string": issuer.token(sub="carol", roles="corpus:read ask"),
        "expired": issuer.token(sub="alice", roles=["ask"], exp=now - 120, iat=now - 400),
        "expired within the leeway": issuer.token(sub="alice", roles=["ask"], exp=now - 10),
        "other audience": issuer.token(sub="alice", roles=["ask"], aud="another-service"),
        "other issuer": issuer.token(sub="alice", roles=["ask"], iss="https://evil.test"),
        "other key": issuer.token(
            sub="alice",
            roles=["ask"],
            signer=rsa.generate_private_key(public_exponent=65537, key_size=2048),
        ),
        "alg none": jwt.encode(
            {
                "sub": "alice",
                "roles": ["admin"],
                "iss": "https://issuer.test",
                "aud": "ragagent",
                "exp": now + 300,
            },
            "",
            algorithm="none",
            headers={"kid": issuer.kid},
        ),
        "no subject": issuer.token(roles=["ask"]),
        "no expiry": issuer.token(sub="alice", roles=["ask"], exp=None),
    }
    # HS256 keyed with the public key: the classic algorithm confusion. PyJWT refuses to
    # make one, so it is put together by hand.
    tokens["hmac with the public key"] = _hmac_token(public_pem, issuer.kid, now)
    _, ask = EVERY_RPC["Ask"]
    _, stats = EVERY_RPC["GetCorpusStats"]
    # Every log line, as production writes them (to stderr), to look for the tokens in.
    configure_logging("DEBUG", "json")
    capsys.readouterr()
    async with running_server(
        tmp_path / "data", jwt_jwks_file=jwks, jwt_issuer=ISSUER, jwt_audience="ragagent"
    ) as srv:
        got = {
            name: (
                await outcome(ask, srv.channel, bearer(token)),
                await outcome(stats, srv.channel, bearer(token)),
            )
            for name, token in tokens.items()
        }
    logged = capsys.readouterr().err
    # Neither a token nor its signature (the part that makes it a credential) is logged.
    leaked = [
        name
        for name, token in tokens.items()
        if token in logged or (token.rsplit(".", 1)[-1] or token) in logged
    ]
    assert leaked == []
    assert '"principal": "alice"' in logged  # the access log names the caller instead
    assert got.pop("good") == ("OK", "PERMISSION_DENIED/PERMISSION_DENIED")
    assert got.pop("roles as a string") == ("OK", "OK")
    assert got.pop("expired within the leeway") == ("OK", "PERMISSION_DENIED/PERMISSION_DENIED")
    assert got == dict.fromkeys(got, (INVALID, INVALID))


def _hmac_token(secret: bytes, kid: str, now: int) -> str:
    import base64
    import hashlib
    import hmac

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = part(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = part(
        json.dumps(
            {
                "sub": "mallory",
                "roles": ["admin"],
                "iss": "https://issuer.test",
                "aud": "ragagent",
                "exp": now + 300,
            }
        ).encode()
    )
    signature = hmac.new(secret, f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{part(signature)}"


@contextmanager
def jwks_server(jwks: Path) -> Iterator[str]:
    """Serves the JWKS file on loopback, as an issuer's well-known endpoint would."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = jwks.read_bytes()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    finally:
        server.shutdown()
        server.server_close()


async def test_keys_from_a_jwks_url_and_a_rotation_at_the_issuer(tmp_path: Path) -> None:
    jwks = tmp_path / "jwks.json"
    old = Issuer(jwks, kid="old")
    _, ask = EVERY_RPC["Ask"]
    with jwks_server(jwks) as url:
        async with running_server(
            tmp_path / "data", jwt_jwks_url=url, jwt_issuer=ISSUER, jwt_audience="ragagent"
        ) as srv:
            first = await outcome(ask, srv.channel, bearer(old.token(sub="a", roles=["ask"])))
            new = Issuer(jwks, kid="new")  # the issuer rotates: the URL now has "new" only
            token = new.token(sub="a", roles=["ask"])
            at_once = await outcome(ask, srv.channel, bearer(token))
            # An unknown key id makes the server fetch the set again (in the background,
            # at most every 30 s), so a retry soon after succeeds.
            await asyncio.sleep(0.5)
            retried = await outcome(ask, srv.channel, bearer(token))
            stale = await outcome(ask, srv.channel, bearer(old.token(sub="a", roles=["ask"])))
    assert first == "OK"
    assert at_once == INVALID
    assert retried == "OK"
    assert stale == INVALID


def _verifier(
    jwks: Path, leeway_s: float = 0.0, clock: Callable[[], float] = time.time
) -> JwtVerifier:
    verifier = JwtVerifier(
        JwtConfig(issuer=ISSUER, audience="ragagent", leeway_s=leeway_s, jwks_file=jwks),
        clock=clock,
    )
    verifier.refresh_file()
    return verifier


def test_a_remembered_token_still_expires_and_goes_with_its_key(tmp_path: Path) -> None:
    jwks = tmp_path / "jwks.json"
    issuer = Issuer(jwks)
    now = [time.time()]  # the verifier's clock, moved by the test
    verifier = _verifier(jwks, clock=lambda: now[0])
    short = issuer.token(sub="a", roles=["ask"], exp=int(now[0]) + 1)
    assert verifier.verify(short).name == "a"
    assert verifier.verify(short).name == "a"  # from memory
    now[0] += 2.1
    with pytest.raises(TokenRejected, match="expired"):
        verifier.verify(short)

    lasting = issuer.token(sub="b", roles=["ask"])
    assert verifier.verify(lasting).name == "b"
    Issuer(jwks, kid="next")  # the set now holds another key only
    os.utime(jwks, ns=(time.time_ns(), time.time_ns() + 1_000_000_000))
    verifier.refresh_file()
    with pytest.raises(TokenRejected, match="does not know"):
        verifier.verify(lasting)
