"""Settings that bound what one ingested document may cost (docs/security.md)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class IngestLimitSettings(BaseModel):
    """The CPU budget of parsing and chunking one document."""

    ingest_document_cpu_seconds: float = Field(
        30.0,
        ge=0,
        description="CPU seconds that parsing and chunking one document may use (0: no "
        "limit). A document over it fails with INVALID_ARGUMENT naming it, documents before "
        "it in the stream stay indexed, and the server goes on. Linear-time parsing takes "
        "about 1-15 s for the largest document accepted (2 MiB), depending on its shape.",
    )
