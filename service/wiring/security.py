"""The security part of the composition root: builds, from Settings, what the interceptor
layers are handed (small config objects and verifiers) and owns what keeps them current
(the key-file and JWKS watchers, TLS reloads). Only server.py uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import httpx

from service.access import LabelError, check_name
from service.api.interceptors.authn import Authentication
from service.api.interceptors.limits import RateLimits
from service.config import Settings
from service.errors import ConfigurationError
from service.observability.logging import get_logger
from service.security.apikeys import KeyRing
from service.security.groups import certificate_ou_groups
from service.security.principal import ROLE_NAMES, Role
from service.security.tls import ServerTls, TlsFiles, certificate_principal
from service.security.tokens import JwtConfig, JwtVerifier, TokenRejected

log = get_logger("ragagent.security")


def _granted_roles(settings: Settings) -> dict[str, frozenset[Role]]:
    granted = {}
    for name, roles in settings.principal_roles.items():
        unknown = sorted(set(roles) - ROLE_NAMES)
        if unknown:
            raise ConfigurationError(
                f"RAGAGENT_PRINCIPAL_ROLES: unknown role {unknown[0]!r} for {name!r} "
                f"(roles: {', '.join(sorted(ROLE_NAMES))})"
            )
        granted[name] = frozenset(Role(r) for r in roles)
    return granted


def _granted_groups(settings: Settings) -> dict[str, frozenset[str]]:
    granted = {}
    for name, groups in settings.principal_groups.items():
        try:
            granted[name] = frozenset(check_name(g, "a group") for g in groups)
        except LabelError as error:
            raise ConfigurationError(f"RAGAGENT_PRINCIPAL_GROUPS: {name!r}: {error}") from None
    return granted


def _check_groups_header(settings: Settings) -> None:
    if settings.trusted_groups_header and not settings.trusted_principal_header:
        raise ConfigurationError(
            "RAGAGENT_TRUSTED_GROUPS_HEADER needs RAGAGENT_TRUSTED_PRINCIPAL_HEADER: the "
            "groups header is only believed for callers the trusted principal header names"
        )


def _tls(settings: Settings) -> ServerTls | None:
    cert, key, ca = settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file
    if cert is None and key is None:
        if ca is not None:
            raise ConfigurationError(
                "RAGAGENT_TLS_CLIENT_CA_FILE needs RAGAGENT_TLS_CERT_FILE and "
                "RAGAGENT_TLS_KEY_FILE: client certificates are only asked for over TLS"
            )
        return None
    if cert is None or key is None:
        raise ConfigurationError(
            "RAGAGENT_TLS_CERT_FILE and RAGAGENT_TLS_KEY_FILE go together: set both or neither"
        )
    return ServerTls(TlsFiles(cert=cert, key=key, client_ca=ca))


def _jwt(settings: Settings) -> JwtVerifier | None:
    if settings.jwt_jwks_file is None and settings.jwt_jwks_url is None:
        return None
    if not settings.jwt_issuer or not settings.jwt_audience:
        raise ConfigurationError(
            "JWT authentication needs RAGAGENT_JWT_ISSUER and RAGAGENT_JWT_AUDIENCE: a token "
            "from any issuer, or meant for any service, must not be accepted"
        )
    verifier = JwtVerifier(
        JwtConfig(
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
            roles_claim=settings.jwt_roles_claim,
            groups_claim=settings.jwt_groups_claim,
            leeway_s=settings.jwt_leeway,
            jwks_file=settings.jwt_jwks_file,
            jwks_url=settings.jwt_jwks_url,
            refresh_s=settings.jwt_jwks_refresh,
        )
    )
    if settings.jwt_jwks_file is not None:
        try:
            verifier.refresh_file()
        except (OSError, ValueError) as error:
            raise ConfigurationError(f"RAGAGENT_JWT_JWKS_FILE: {error}") from None
    return verifier


@dataclass
class Security:
    authentication: Authentication
    limits: RateLimits
    tls: ServerTls | None = None
    keys: KeyRing | None = None
    jwt: JwtVerifier | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _http: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Security:
        """Reads the key file, JWKS file and certificates (blocking: start-up only)."""
        keys = None
        if settings.api_keys_file is not None:
            keys = KeyRing(settings.api_keys_file)
            if not settings.api_keys_file.exists():
                log.warning(
                    "the API key file does not exist yet: every key is refused until "
                    "`ragagent keys create` writes it",
                    path=str(settings.api_keys_file),
                )
            keys.refresh()
        jwt = _jwt(settings)
        tls = _tls(settings)
        _check_groups_header(settings)
        authentication = Authentication(
            api_keys=keys,
            tokens=jwt,
            token_errors=(TokenRejected,),
            client_certificates=tls is not None and tls.requires_client_certificate,
            certificate_principal=certificate_principal,
            certificate_trust=tls.trust_check if tls is not None else None,
            trusted_header=(settings.trusted_principal_header or "").lower() or None,
            granted_roles=_granted_roles(settings),
            granted_groups=_granted_groups(settings),
            certificate_groups=certificate_ou_groups if settings.certificate_ou_groups else None,
            groups_header=(settings.trusted_groups_header or "").lower() or None,
            protect_open_methods=settings.auth_protect_open_methods,
            aliases=settings.auth_principal_aliases,
        )
        limits = RateLimits(
            requests_per_minute=settings.rate_limit_requests_per_minute,
            concurrent_streams=settings.rate_limit_concurrent_streams,
        )
        return cls(authentication, limits, tls=tls, keys=keys, jwt=jwt)

    async def start(self) -> None:
        """Starts keeping the keys current; fetches a JWKS URL once first."""
        if self.keys is not None:
            self._tasks.append(asyncio.create_task(self.keys.watch()))
        if self.jwt is not None:
            if self.jwt.config.jwks_url is not None:
                self._http = httpx.AsyncClient(timeout=10.0)
                await self.jwt.refresh(self._http)
            self._tasks.append(asyncio.create_task(self.jwt.watch(self._http)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def reload_certificates(self) -> bool:
        """Re-reads the TLS files (on SIGHUP); new connections use them."""
        if self.tls is None:
            log.info("SIGHUP: no TLS certificate to reload")
            return False
        return await asyncio.to_thread(self.tls.reload)


def describe(security: Security) -> str:
    """How callers are authenticated, for the start-up log line."""
    auth = security.authentication
    ways = [
        name
        for name, on in (
            ("api-keys", auth.api_keys is not None),
            ("jwt", auth.tokens is not None),
            ("client-certificates", auth.client_certificates),
            ("trusted-header", auth.trusted_header is not None),
        )
        if on
    ]
    return ",".join(ways) or "none"
