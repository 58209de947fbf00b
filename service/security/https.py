"""The HTTP listener's TLS: the gRPC listener's certificate, key and client CAs as an
:class:`ssl.SSLContext`, replaced on SIGHUP for the connections that follow.

asyncio keeps the context it was given when the listener started. Each handshake asks that
context's SNI callback first (OpenSSL calls it with or without a server name), and the
callback hands the connection the newest context: a reloaded certificate serves the next
connection and a client CA removed from the file refuses the next handshake, while the
connections already open keep theirs. The client-certificate requirement is the context's
at start-up (the file's path does not change on reload), as on gRPC.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.security.tls import TlsFiles

# HTTP/1.1 only (uvicorn with httptools); said in ALPN so that an HTTP/2 client falls back.
ALPN = ["http/1.1"]


def _no_password() -> bytes:
    raise ValueError("the private key is encrypted; the server needs it unencrypted")


class HttpsContext:
    """The listener's :attr:`server_context`; :meth:`load` and :meth:`use` replace what
    it hands to new handshakes."""

    def __init__(self, files: TlsFiles) -> None:
        self._files = files
        self.server_context = self.load()
        self._current = self.server_context
        self.server_context.sni_callback = self._hand_over

    def load(self) -> ssl.SSLContext:
        """A context from the files as they are now (blocking: they are read). Raises
        OSError, ssl.SSLError or ValueError when they cannot serve."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(ALPN)
        # No session tickets: a resumed session skips the client-certificate check, and
        # the check must see the client-CA file of the context that is current.
        context.options |= ssl.OP_NO_TICKET
        context.num_tickets = 0
        context.load_cert_chain(self._files.cert, self._files.key, password=_no_password)
        if self._files.client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=self._files.client_ca)
        return context

    def use(self, context: ssl.SSLContext) -> None:
        """New handshakes get ``context`` (one assignment: safe from the reload thread)."""
        self._current = context

    def _hand_over(
        self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
    ) -> None:
        current = self._current
        if current is not context:
            connection.context = current
