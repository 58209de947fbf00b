"""Authentication: which principal a call comes from, established once when it starts.

Credentials are tried in a fixed order: a bearer credential (an API key, else a JWT), then
the client certificate (mTLS), then a header a trusted proxy sets. A bearer credential that
does not verify refuses the call even when a certificate would have passed: a caller that
presents a wrong credential has made a mistake worth hearing about.

With no authentication configured (the laptop default) every caller is let in, named by the
``x-user-id`` header as before, with every role but admin. Health checks and server
reflection are open unless :attr:`Authentication.protect_open_methods` says otherwise.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

import grpc
import structlog
from google.protobuf.message import Message

from service.api.identity import USER_ID_HEADER, bind_caller
from service.api.interceptors.call import Call
from service.errors import CredentialsInvalid, Unauthenticated
from service.owners import principal_name
from service.security.apikeys import looks_like_key
from service.security.groups import header_groups
from service.security.principal import (
    UNAUTHENTICATED_ROLES,
    Principal,
    Role,
)

AUTHORIZATION_HEADER = "authorization"
OPEN_PREFIXES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)
NOBODY = Principal(name="", roles=frozenset(), method="none")


class KeyVerifier(Protocol):
    def verify(self, key: str) -> Principal | None: ...


class TokenVerifier(Protocol):
    def verify(self, token: str) -> Principal: ...  # raises an exception saying why not


def is_open(method: str) -> bool:
    return method.startswith(OPEN_PREFIXES)


@dataclass(frozen=True)
class Authentication:
    """What the composition root set up; with nothing set, authentication is off."""

    api_keys: KeyVerifier | None = None
    tokens: TokenVerifier | None = None
    token_errors: tuple[type[Exception], ...] = ()
    # mTLS: the client certificate names the principal (see tls.certificate_principal).
    client_certificates: bool = False
    certificate_principal: Callable[[bytes], str] | None = None
    # While a stream is open: whether its client certificate is still trusted (None: the
    # handshake's word is all there is; see tls.ServerTls.trust_check).
    certificate_trust: Callable[[bytes], Callable[[], bool] | None] | None = None
    # A header set by a sidecar that authenticated the caller already.
    trusted_header: str | None = None
    # Roles of principals named by a certificate or the trusted header ("*": anyone's).
    granted_roles: Mapping[str, frozenset[Role]] = field(default_factory=dict)
    # Their groups likewise (RAGAGENT_PRINCIPAL_GROUPS); a certificate's own (its OUs) and
    # the trusted groups header add to them (service.security.groups).
    granted_groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    certificate_groups: Callable[[bytes], frozenset[str]] | None = None
    groups_header: str | None = None
    protect_open_methods: bool = False
    # Owner id -> the owner id to use instead (two identities of one person).
    aliases: Mapping[str, str] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.api_keys or self.tokens or self.client_certificates or self.trusted_header)


class Authenticate:
    """The chain's authentication layer; binds the principal for the servicers."""

    _CACHED_CERTIFICATES = 1024

    def __init__(self, config: Authentication) -> None:
        self._config = config
        # A client's certificate is the same on every call of its connection: parsed once.
        self._names: OrderedDict[bytes, str] = OrderedDict()

    def start(self, call: Call) -> None:
        config = self._config
        if is_open(call.method) and not config.protect_open_methods:
            principal = NOBODY
        elif not config.enabled:
            principal = Principal(
                name=principal_name(call.value(USER_ID_HEADER) or ""),
                roles=UNAUTHENTICATED_ROLES,
                method="none",
            )
        else:
            principal = self._authenticate(call)
            call.recheck = self._recheck(call, principal)
        alias = config.aliases.get(principal.owner)
        if alias:
            principal = replace(principal, alias=alias)
        call.principal = principal
        bind_caller(principal)
        structlog.contextvars.bind_contextvars(principal=principal.name)

    def _authenticate(self, call: Call) -> Principal:
        config = self._config
        bearer = _bearer(call.value(AUTHORIZATION_HEADER))
        if bearer is not None:
            return self._verify_bearer(bearer)
        certificate = (call.auth.get("x509_pem_cert") or (b"",))[0]
        if config.client_certificates and certificate:
            name = self._certificate_name(certificate)
            if name:
                own = config.certificate_groups
                return self._granted(name, "certificate", own(certificate) if own else None)
        if config.trusted_header:
            named = call.value(config.trusted_header)
            if named and named.strip():
                listed = call.value(config.groups_header) if config.groups_header else None
                groups = header_groups(listed) or None
                return self._granted(principal_name(named), "trusted-header", groups)
        raise Unauthenticated(
            "this server requires credentials: an API key or token as "
            "'authorization: Bearer ...', or a client certificate"
        )

    def _verify_bearer(self, bearer: str) -> Principal:
        config = self._config
        if config.api_keys is not None and looks_like_key(bearer):
            principal = config.api_keys.verify(bearer)
            if principal is None:
                raise CredentialsInvalid("the API key is not valid")
            return principal
        if config.tokens is not None and bearer.count(".") == 2:
            try:
                return config.tokens.verify(bearer)
            except config.token_errors as error:
                raise CredentialsInvalid(str(error)) from None
        raise CredentialsInvalid("the bearer credential is not valid")

    def _recheck(self, call: Call, principal: Principal) -> Callable[[], None] | None:
        """What tells, later in a stream, that the credential has lapsed: an API key
        revoked (the key file is re-read every second), a JWT expired or its signing key
        withdrawn, a client certificate expired or its CA removed from the client-CA file
        (re-read on SIGHUP)."""
        if principal.method == "certificate":
            return self._certificate_recheck(call)
        bearer = _bearer(call.value(AUTHORIZATION_HEADER))
        if not bearer:
            return None

        def recheck() -> None:
            self._verify_bearer(bearer)  # raises CredentialsInvalid once it no longer passes

        return recheck

    def _certificate_recheck(self, call: Call) -> Callable[[], None] | None:
        trust = self._config.certificate_trust
        certificate = (call.auth.get("x509_pem_cert") or (b"",))[0]
        trusted = trust(certificate) if trust is not None and certificate else None
        if trusted is None:
            return None

        def recheck() -> None:
            if not trusted():
                raise CredentialsInvalid(
                    "the client certificate is no longer trusted (expired, or its CA was "
                    "removed from the server's client-CA file)"
                )

        return recheck

    def _granted(self, name: str, method: str, groups: frozenset[str] | None) -> Principal:
        roles = self._config.granted_roles
        granted = self._config.granted_groups
        return Principal(
            name=name,
            roles=roles.get(name, roles.get("*", frozenset())),
            method=method,
            groups=granted.get(name, granted.get("*", frozenset())) | (groups or frozenset()),
        )

    def _certificate_name(self, pem: bytes) -> str:
        name = self._names.get(pem)
        if name is None:
            parse = self._config.certificate_principal
            name = principal_name(parse(pem)) if parse is not None else ""
            self._names[pem] = name
            if len(self._names) > self._CACHED_CERTIFICATES:
                self._names.popitem(last=False)
        else:
            self._names.move_to_end(pem)
        return name

    def message(self, call: Call, message: Message, index: int | None) -> None:
        return None

    def end(self, call: Call, code: grpc.StatusCode) -> None:
        return None


def _bearer(value: str | None) -> str | None:
    """The credential of an ``authorization: Bearer <credential>`` header; an empty
    string (refused) for any other scheme or a malformed value, None without the header."""
    if value is None:
        return None
    scheme, _, credential = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return ""
    return credential.strip()
