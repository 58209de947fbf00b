"""JWTs minted by a mesh or gateway: signature against a JWKS, issuer, audience, expiry.

The key set comes from a file (re-read when it changes) or a URL (fetched with httpx at
start-up and every refresh interval, and soon after a token names a key id the set does
not have, for key rotation at the issuer). Verification itself never does I/O: it runs on
the event loop at the start of every call, against the keys in memory.

Only asymmetric algorithms are accepted, so that a public JWKS can never be used as an HMAC
secret, and ``none`` never passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt

from service.errors import ConfigurationError
from service.observability.logging import get_logger
from service.owners import principal_name
from service.security.groups import parse_groups
from service.security.principal import Principal, parse_roles

log = get_logger("ragagent.security")

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA")
# An unknown key id triggers a refetch at most this often (a flood of bogus tokens must not
# become a flood of requests to the issuer).
UNKNOWN_KID_REFETCH_S = 30.0
VERIFIED_TOKENS = 2048


@dataclass(frozen=True, slots=True)
class JwtConfig:
    issuer: str
    audience: str
    roles_claim: str = "roles"
    groups_claim: str = "groups"
    leeway_s: float = 30.0
    jwks_file: Path | None = None
    jwks_url: str | None = None
    refresh_s: float = 300.0


class TokenRejected(Exception):
    """Why a token was refused, in words safe to send back (never the token)."""


class JwtVerifier:
    def __init__(self, config: JwtConfig, *, clock: Callable[[], float] = time.time) -> None:
        if (config.jwks_file is None) == (config.jwks_url is None):
            raise ConfigurationError(
                "JWT authentication needs exactly one of RAGAGENT_JWT_JWKS_FILE and "
                "RAGAGENT_JWT_JWKS_URL"
            )
        self.config = config
        # Wall-clock seconds; expiry (of a fresh token and of a remembered one) is judged by it.
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._seen: tuple[int, int, int] | None = None
        self._wanted_at = 0.0
        # Tokens already verified, until they expire: a client sends the same token on every
        # call, and an RS256 check costs ~0.3 ms of the event loop each time.
        self._verified: OrderedDict[str, tuple[float, Principal]] = OrderedDict()
        self._refetch = asyncio.Event()

    def set_keys(self, jwks: dict[str, Any]) -> None:
        keys = {}
        for data in jwks.get("keys", []):
            try:
                key = jwt.PyJWK(data)
            except jwt.PyJWKError as error:  # one unusable key does not spoil the others
                log.warning("JWKS key skipped", kid=data.get("kid"), error=str(error))
                continue
            keys[str(data.get("kid", ""))] = key
        self._keys = keys
        # A key withdrawn from the set takes the tokens it signed with it.
        self._verified = OrderedDict()

    def refresh_file(self) -> None:
        """Re-reads the JWKS file if it changed (blocking)."""
        path = self.config.jwks_file
        assert path is not None
        st = path.stat()
        seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        if seen != self._seen:
            self.set_keys(json.loads(path.read_text(encoding="utf-8")))
            self._seen = seen

    async def refresh(self, client: httpx.AsyncClient | None) -> None:
        """Reads the key set again; a failure keeps the keys as they were. (A file is read on
        a thread of asyncio's own, like the API key file: see apikeys.KeyRing.watch.)"""
        try:
            if self.config.jwks_file is not None:
                await asyncio.to_thread(self.refresh_file)
            elif client is not None and self.config.jwks_url is not None:
                response = await client.get(self.config.jwks_url)
                response.raise_for_status()
                self.set_keys(response.json())
        except (OSError, ValueError, httpx.HTTPError) as error:
            log.warning("JWKS not refreshed; the keys stay as they were", error=str(error))

    async def watch(self, client: httpx.AsyncClient | None) -> None:
        """Keeps the keys current until cancelled: a file every second, a URL every refresh
        interval or soon after an unknown key id."""
        interval = 1.0 if self.config.jwks_file is not None else self.config.refresh_s
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._refetch.wait(), interval)
            self._refetch.clear()
            await self.refresh(client)

    def verify(self, token: str) -> Principal:
        """The token's principal; raises TokenRejected."""
        cached = self._verified.get(token)
        if cached is not None:
            expires, principal = cached
            if self._clock() <= expires + self.config.leeway_s:
                self._verified.move_to_end(token)
                return principal
            del self._verified[token]
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenRejected("the bearer token is not a JWT") from None
        kid = str(header.get("kid", ""))
        key = self._keys.get(kid) or (self._keys.get("") if len(self._keys) == 1 else None)
        if key is None:
            self._want_keys()
            raise TokenRejected("the token is signed by a key this server does not know")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                audience=self.config.audience,
                issuer=self.config.issuer,
                leeway=self.config.leeway_s,
                # Expiry is checked below against this verifier's clock, as for a remembered
                # token, so that both agree.
                options={"require": ["exp", "iss", "aud", "sub"], "verify_exp": False},
            )
        except (jwt.InvalidAudienceError, jwt.InvalidIssuerError):
            raise TokenRejected("the token was not issued for this service") from None
        except jwt.PyJWTError:
            raise TokenRejected("the token is not valid") from None
        _check_times(claims)
        expires = claims["exp"]
        if self._clock() >= expires + self.config.leeway_s:
            raise TokenRejected("the token has expired")
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject.strip():
            raise TokenRejected("the token names no subject")
        principal = Principal(
            name=principal_name(subject),
            roles=parse_roles(claims.get(self.config.roles_claim)),
            method="jwt",
            credential_id=str(claims.get("jti", ""))[:64],
            groups=parse_groups(claims.get(self.config.groups_claim)),
            scope=str(claims["iss"]),
        )
        self._verified[token] = (float(claims["exp"]), principal)
        if len(self._verified) > VERIFIED_TOKENS:
            self._verified.popitem(last=False)
        return principal

    def _want_keys(self) -> None:
        now = time.monotonic()
        if self.config.jwks_url is not None and now - self._wanted_at >= UNKNOWN_KID_REFETCH_S:
            self._wanted_at = now
            self._refetch.set()


def _check_times(claims: dict[str, Any]) -> None:
    """``exp``, ``nbf`` and ``iat`` are NumericDates (RFC 7519 4.1.4): JSON numbers. PyJWT
    reads a string such as "9999999999" as a number too; a token written that way did not
    come from a conforming issuer, so it is refused."""
    for name in ("exp", "nbf", "iat"):
        value = claims.get(name)
        if name in claims and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise TokenRejected(f"the token's {name!r} claim is not a number")
