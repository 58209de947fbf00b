"""Serving TLS, and the principal a client certificate names.

The server's credentials come from grpc's dynamic-certificate API: grpc asks a fetcher for a
new certificate configuration before each new connection's handshake, so a certificate
re-read on SIGHUP serves the next connection while calls on the open ones go on untouched.
The fetcher runs on a grpc thread holding the GIL before every handshake, so it only hands
over a configuration that :meth:`ServerTls.reload` already read and checked.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from service.errors import ConfigurationError
from service.observability.logging import get_logger

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
    except ValueError as error:
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

    @property
    def requires_client_certificate(self) -> bool:
        return self.files.client_ca is not None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self._initial,
            self._fetch,  # type: ignore[arg-type]  # None keeps the current one (grpc's doc)
            require_client_authentication=self.requires_client_certificate,
        )

    def reload(self) -> bool:
        """Re-reads the files (blocking); the next handshake uses them. A broken or
        mismatched pair is refused and the current certificate keeps serving."""
        try:
            cert, key, ca = _read(self.files)
        except (OSError, ValueError) as error:
            log.warning(
                "TLS certificate not reloaded; the current one keeps serving", error=str(error)
            )
            return False
        config = grpc.ssl_server_certificate_configuration([(key, cert)], ca)
        with self._lock:
            self._pending = config
        log.info("TLS certificate reloaded", cert_file=str(self.files.cert))
        return True

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        # None keeps the configuration grpc has; a new one is handed over once.
        with self._lock:
            config, self._pending = self._pending, None
        return config


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
