"""Serving TLS, and the principal a client certificate names.

The gRPC listener's credentials come from grpc's dynamic-certificate API: grpc asks a fetcher for a
new certificate configuration before each new connection's handshake, so a certificate
re-read on SIGHUP serves the next connection while calls on the open ones go on untouched.
The fetcher runs on a grpc thread holding the GIL before every handshake, so it only hands
over a configuration that :meth:`ServerTls.reload` already read and checked. The HTTP
listener serves the same files through :class:`~service.security.https.HttpsContext`,
reloaded with them.

TLS checks a client certificate at the handshake only; :meth:`ServerTls.trust_check` lets the
authentication layer ask again while a stream is open, so a CA removed from the client-CA file
(and SIGHUP) or a certificate that expires ends the streams it opened.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from service.errors import ConfigurationError
from service.observability.logging import get_logger
from service.security.https import HttpsContext

log = get_logger("ragagent.security")


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None


def _read(files: TlsFiles) -> tuple[bytes, bytes, bytes | None]:
    """The PEM files, checked: the certificate parses, the key parses and belongs to it."""
    cert_pem = files.cert.read_bytes()
    key_pem = files.key.read_bytes()
    ca_pem = files.client_ca.read_bytes() if files.client_ca else None
    try:
        leaf = x509.load_pem_x509_certificates(cert_pem)[0]
        key = serialization.load_pem_private_key(key_pem, password=None)
        if ca_pem is not None:
            x509.load_pem_x509_certificates(ca_pem)
    except (ValueError, TypeError) as error:  # TypeError: an encrypted key
        raise ValueError(f"not a usable PEM certificate or key: {error}") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    if key.public_key().public_bytes(encoding, public) != leaf.public_key().public_bytes(
        encoding, public
    ):
        raise ValueError(f"{files.key} is not the key of the certificate in {files.cert}")
    return cert_pem, key_pem, ca_pem


class ServerTls:
    """The server's TLS credentials; :meth:`reload` swaps the certificate without a restart."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        try:
            cert, key, ca = _read(files)
        except (OSError, ValueError) as error:
            raise ConfigurationError(f"cannot serve TLS: {error}") from None
        self._lock = threading.Lock()
        self._pending: grpc.ServerCertificateConfiguration | None = None
        self._initial = grpc.ssl_server_certificate_configuration([(key, cert)], ca)
        # The CAs client certificates are checked against now (replaced whole on reload).
        self._anchors = _anchors(ca)
        self._https: HttpsContext | None = None

    @property
    def requires_client_certificate(self) -> bool:
        return self.files.client_ca is not None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self._initial,
            self._fetch,  # type: ignore[arg-type]  # None keeps the current one (grpc's doc)
            require_client_authentication=self.requires_client_certificate,
        )

    def https(self) -> ssl.SSLContext:
        """The same certificate, key and client CAs for the HTTP listener (blocking: reads
        the files once); :meth:`reload` replaces it for new connections too."""
        if self._https is None:
            try:
                self._https = HttpsContext(self.files)
            except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
                raise ConfigurationError(f"cannot serve TLS over HTTP: {error}") from None
        return self._https.server_context

    def reload(self) -> bool:
        """Re-reads the files (blocking); the next handshake uses them. A broken or
        mismatched pair is refused and the current certificate keeps serving."""
        try:
            cert, key, ca = _read(self.files)
            https = self._https.load() if self._https is not None else None
        except (OSError, ValueError) as error:
            log.warning(
                "TLS certificate not reloaded; the current one keeps serving", error=str(error)
            )
            return False
        config = grpc.ssl_server_certificate_configuration([(key, cert)], ca)
        with self._lock:
            self._pending = config
            self._anchors = _anchors(ca)
            if https is not None and self._https is not None:
                self._https.use(https)
        log.info("TLS certificate reloaded", cert_file=str(self.files.cert))
        return True

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        # None keeps the configuration grpc has; a new one is handed over once.
        with self._lock:
            config, self._pending = self._pending, None
        return config

    def trust_check(self, pem: bytes) -> Callable[[], bool] | None:
        """What tells, later in a call, whether the client certificate ``pem`` is still
        trusted: issued by a CA of the current client-CA file and not expired. None when no
        CA of the file issued it directly (the client sent an intermediate the file does not
        hold): the handshake alone vouches for such a certificate."""
        try:
            leaf = x509.load_pem_x509_certificate(pem)
        except ValueError:
            return None
        checked = self._anchors
        if _issuer_in(leaf, checked) is None:
            return None
        expires = leaf.not_valid_after_utc

        def trusted() -> bool:
            nonlocal checked
            if datetime.now(UTC) > expires:
                return False
            anchors = self._anchors
            if anchors is checked:  # no reload since: the signature still verifies
                return True
            if _issuer_in(leaf, anchors) is None:
                return False
            checked = anchors
            return True

        return trusted


def _anchors(ca_pem: bytes | None) -> tuple[x509.Certificate, ...]:
    return tuple(x509.load_pem_x509_certificates(ca_pem)) if ca_pem else ()


def _issuer_in(
    leaf: x509.Certificate, anchors: tuple[x509.Certificate, ...]
) -> x509.Certificate | None:
    """The CA among ``anchors`` that signed ``leaf``, if any."""
    for ca in anchors:
        if ca.subject != leaf.issuer:
            continue
        try:
            leaf.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return ca
    return None


def certificate_principal(pem: bytes) -> str:
    """Who a client certificate names: its first URI SAN (a SPIFFE id), else its first DNS
    SAN, else its subject's common name; empty when it names nobody."""
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return ""
    try:
        names: x509.SubjectAlternativeName | None = cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        ).value
    except x509.ExtensionNotFound:
        names = None
    if names is not None:
        for kind in (x509.UniformResourceIdentifier, x509.DNSName):
            values = names.get_values_for_type(kind)
            if values:
                return str(values[0])
    common = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = common[0].value if common else ""
    return value if isinstance(value, str) else value.decode(errors="replace")
