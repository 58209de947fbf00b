"""Settings of the HTTP listener: Connect, gRPC-Web and JSON for browsers (docs/clients.md)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, field_validator


class HttpSettings(BaseModel):
    """The second listener: the same services over Connect and gRPC-Web (off by default)."""

    http_address: str = Field(
        "",
        description="HOST:PORT of the HTTP listener that serves every RPC over Connect (JSON "
        "and binary) and gRPC-Web, for browsers, curl and buf curl, with the same "
        "authentication, limits and validation as gRPC; empty = not served (port 0 picks a "
        "free port). With RAGAGENT_TLS_CERT_FILE it serves HTTPS only, with the gRPC port's "
        "certificate and client CAs (mutual TLS too). `ragagent demo` turns it on.",
    )
    http_cors_origins: str = Field(
        "",
        description="Comma-separated origins (scheme://host[:port]) whose pages may call the "
        "HTTP listener from a browser, or * for any; empty = no cross-origin calls (a page "
        "served by the listener itself, `ragagent serve --web`, needs none).",
    )
    http_web: bool = Field(
        False,
        description="Serve the chat widget (web/dist) at / of the HTTP listener "
        "(`ragagent serve --web`).",
    )

    http_web_dir: Path | None = Field(
        None,
        description="Folder of the built chat widget (index.html, widget.js) that "
        "RAGAGENT_HTTP_WEB serves; default: web/dist of the source checkout (`make web`).",
    )

    @field_validator("http_address")
    @classmethod
    def _check_http_address(cls, value: str) -> str:
        value = value.strip()
        if value and not value.rpartition(":")[2].isdigit():
            raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8080)")
        return value

    @field_validator("http_cors_origins")
    @classmethod
    def _check_origins(cls, value: str) -> str:
        for origin in (o.strip() for o in value.split(",")):
            if origin and origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(f"{origin!r} is not an origin (scheme://host[:port]) or *")
            if origin.endswith("/"):
                raise ValueError(f"{origin!r}: an origin has no path, not even a trailing /")
        return value

    @property
    def cors_origins(self) -> frozenset[str]:
        return frozenset(o.strip() for o in self.http_cors_origins.split(",") if o.strip())
