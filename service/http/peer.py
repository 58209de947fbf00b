"""What the HTTP transport knows of the peer, in the words gRPC's authentication reads.

uvicorn puts no TLS details in the ASGI scope. :class:`PeerProtocol` (uvicorn's httptools
protocol) adds the ASGI TLS extension (``scope["extensions"]["tls"]``) to every request of
a TLS connection, read once when the handshake is done. :func:`auth_context` turns it into
the keys grpc's ``auth_context()`` has for the same connection (``x509_pem_cert``,
``x509_common_name``, ``transport_security_type``...), so that the one authentication layer
decides over both listeners. connectrpc hands its interceptors no scope: the application
binds the peer's auth context for the request (:func:`bind_scope`) and the chain reads it
(:func:`peer_auth`).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import ssl
from contextvars import ContextVar
from typing import Any, cast

from cryptography import x509
from cryptography.x509.oid import NameOID
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

Auth = dict[str, tuple[bytes, ...]]

# grpc's auth context of a plaintext connection.
PLAINTEXT: Auth = {
    "transport_security_type": (b"insecure",),
    "security_level": (b"TSI_SECURITY_NONE",),
}
# The ASGI TLS extension's tls_version: the TLS record version numbers.
_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}
_VERSION_NAMES = {number: name for name, number in _VERSIONS.items()}

_auth: ContextVar[Auth] = ContextVar("ragagent_http_peer_auth", default=PLAINTEXT)


def tls_extension(connection: ssl.SSLObject) -> dict[str, Any]:
    """The ASGI TLS extension of a connection whose handshake is done. The client's
    certificate only, without its chain: the ssl module gives no more."""
    peer = connection.getpeercert(binary_form=True)
    return {
        "server_cert": None,
        "client_cert_chain": [ssl.DER_cert_to_PEM_cert(peer)] if peer else [],
        "client_cert_name": None,
        "client_cert_error": None,
        "tls_version": _VERSIONS.get(connection.version() or ""),
        "cipher_suite": None,
    }


class PeerProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol, with the ASGI TLS extension in each request's scope."""

    _tls: dict[str, Any] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        connection = transport.get_extra_info("ssl_object")
        if isinstance(connection, ssl.SSLObject):
            self._tls = tls_extension(connection)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._tls is not None:
            extensions = self.scope.setdefault("extensions", {})
            extensions["tls"] = cast("dict[object, object]", self._tls)


def bind_scope(scope: dict[str, Any]) -> None:
    """The auth context of this request's connection, for :func:`peer_auth` in its task."""
    tls = (scope.get("extensions") or {}).get("tls")
    if tls is None:
        _auth.set(PLAINTEXT)
        return
    chain = tls.get("client_cert_chain") or ()
    version = _VERSION_NAMES.get(tls.get("tls_version") or 0, "")
    _auth.set(auth_context(chain[0] if chain else "", version))


def peer_auth() -> Auth:
    """The auth context bound for the request being handled (a copy: the call owns it)."""
    return dict(_auth.get())


@functools.lru_cache(maxsize=1024)
def auth_context(certificate_pem: str, tls_version: str) -> Auth:
    """grpc's auth-context keys for a TLS connection with this client certificate (PEM,
    empty for none). Cached: a client's certificate is the same on each of its calls."""
    auth: Auth = {
        "transport_security_type": (b"ssl",),
        "security_level": (b"TSI_PRIVACY_AND_INTEGRITY",),
    }
    if tls_version:
        auth["ssl_tls_version"] = (tls_version.encode(),)
    if not certificate_pem:
        return auth
    pem = certificate_pem.encode()
    auth["x509_pem_cert"] = (pem,)
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:  # the handshake accepted it; authentication says what it names
        return auth
    auth["x509_subject"] = (cert.subject.rfc4514_string().encode(),)
    common = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if common:
        value = common[0].value
        auth["x509_common_name"] = (value.encode() if isinstance(value, str) else value,)
    auth.update(_alternative_names(cert))
    return auth


def _alternative_names(cert: x509.Certificate) -> Auth:
    """The SANs as grpc lists them: all in ``x509_subject_alternative_name``, each kind in
    its ``peer_*`` key, and ``peer_spiffe_id`` for a single SPIFFE URI."""
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return {}
    found: dict[str, list[bytes]] = {}
    for name in names:
        if isinstance(name, x509.DNSName):
            key, value = "peer_dns", name.value
        elif isinstance(name, x509.UniformResourceIdentifier):
            key, value = "peer_uri", name.value
        elif isinstance(name, x509.RFC822Name):
            key, value = "peer_email", name.value
        elif isinstance(name, x509.IPAddress) and not isinstance(
            name.value, ipaddress.IPv4Network | ipaddress.IPv6Network
        ):
            key, value = "peer_ip", str(name.value)
        else:
            continue
        found.setdefault("x509_subject_alternative_name", []).append(value.encode())
        found.setdefault(key, []).append(value.encode())
    uris = found.get("peer_uri", [])
    if len(uris) == 1 and uris[0].startswith(b"spiffe://"):
        found["peer_spiffe_id"] = uris
    return {key: tuple(values) for key, values in found.items()}
