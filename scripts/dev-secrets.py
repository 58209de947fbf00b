#!/usr/bin/env python3
"""The development CA, certificates and first API key of deploy/compose.yaml.

Run once by compose's ``dev-secrets`` service (inside the ragagent image, as root, over the
``secrets`` volume) before any replica starts; later runs find the CA and change nothing.
It writes, in FOLDER:

- ``ca.pem``: a CA made here, valid 1 year; clients trust it (docs/clients.md);
- ``ragagent.pem``/``ragagent.key``: the replicas' certificate (DNS ``ragagent``, which Envoy
  verifies), owned by the image's user 10001, mode 0400;
- ``envoy.pem``/``envoy.key``: the certificate Envoy presents to clients on 127.0.0.1:8443
  (DNS ``localhost``, IP 127.0.0.1), owned by Envoy's user 101, mode 0400;
- ``keys.jsonl``: API key hashes (``ragagent keys``), readable by 10001; the key itself is
  printed once, on the log (``docker compose logs dev-secrets``), never stored.

``--new-key PRINCIPAL`` adds one more key (roles ``ask`` and ``corpus:write``) and prints it:
``docker compose run --rm dev-secrets /secrets --new-key alice``.

For development only: a production deployment takes its certificates from its own CA (or
cert-manager) and its keys from ``ragagent keys create`` (docs/security.md).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from service.security.apikeys import create_key

RAGAGENT_UID = 10001  # the image's USER (Dockerfile)
ENVOY_UID = 101  # the envoy image's user, which its entrypoint switches to
VALIDITY = datetime.timedelta(days=365)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _ca() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("ragagent development CA"))
        .issuer_name(_name("ragagent development CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate, dns: list[str], ips: list[str]
) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def _write(path: Path, data: bytes, *, owner: int, mode: int) -> None:
    path.write_bytes(data)
    os.chmod(path, mode)
    if os.geteuid() == 0:  # as root (compose): hand the file to the process that reads it
        os.chown(path, owner, owner)


def _new_key(folder: Path, principal: str) -> None:
    keys = folder / "keys.jsonl"
    record, key = create_key(keys, principal, ["ask", "corpus:write"])
    if os.geteuid() == 0:
        os.chown(keys, RAGAGENT_UID, RAGAGENT_UID)
    print(f"API key {record.id} for {principal} (ask, corpus:write); shown this once:")
    print(key, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--new-key", metavar="PRINCIPAL", help="add an API key and print it")
    args = parser.parse_args(argv)
    folder: Path = args.folder
    folder.mkdir(parents=True, exist_ok=True)
    if args.new_key:
        _new_key(folder, args.new_key)
        return 0
    if (folder / "ca.pem").exists():
        print(f"dev-secrets: {folder} holds a CA already; nothing changed")
        print((folder / "ca.pem").read_text(), end="", flush=True)
        return 0
    ca_key, ca = _ca()
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    server = _leaf(ca_key, ca, ["ragagent", "localhost"], ["127.0.0.1"])
    envoy = _leaf(ca_key, ca, ["localhost", "envoy"], ["127.0.0.1", "::1"])
    _write(folder / "ragagent.pem", server[0], owner=RAGAGENT_UID, mode=0o444)
    _write(folder / "ragagent.key", server[1], owner=RAGAGENT_UID, mode=0o400)
    _write(folder / "envoy.pem", envoy[0], owner=ENVOY_UID, mode=0o444)
    _write(folder / "envoy.key", envoy[1], owner=ENVOY_UID, mode=0o400)
    _new_key(folder, "dev")
    # Last: its presence means "done" to the next run, so a run cut short starts over.
    _write(folder / "ca.pem", ca_pem, owner=0, mode=0o444)
    print("dev-secrets: the CA clients trust (save it as ca.pem):")
    print(ca_pem.decode(), end="", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
