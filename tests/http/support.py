"""What the HTTPS tests share: clients of the listener with a CA and a client certificate,
and Connect's stream envelopes in JSON."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import trustme

from tests.helpers import Running
from tests.security.support import CertFiles


def client_ca_file(folder: Path, *cas: trustme.CA) -> Path:
    path = folder / "client-ca.pem"
    path.write_bytes(b"".join(ca.cert_pem.bytes() for ca in cas))
    return path


def https_client(
    srv: Running | int, trusted: trustme.CA, client: CertFiles | None = None
) -> httpx.AsyncClient:
    """An HTTPS client of the listener that trusts ``trusted`` and presents ``client``."""
    port = srv if isinstance(srv, int) else srv.server.http_port
    context = ssl.create_default_context(cadata=trusted.cert_pem.bytes().decode())
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    return httpx.AsyncClient(base_url=f"https://127.0.0.1:{port}", verify=context, timeout=30)


def envelope(message: dict[str, object]) -> bytes:
    data = json.dumps(message).encode()
    return b"\x00" + len(data).to_bytes(4, "big") + data


async def messages(reply: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON messages of a Connect stream, the end-of-stream message last."""
    buffer = b""
    async for chunk in reply.aiter_bytes():
        buffer += chunk
        while len(buffer) >= 5 and len(buffer) >= 5 + int.from_bytes(buffer[1:5], "big"):
            size = int.from_bytes(buffer[1:5], "big")
            yield json.loads(buffer[5 : 5 + size])
            buffer = buffer[5 + size :]
