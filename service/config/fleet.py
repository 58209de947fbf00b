"""Settings of running several replicas over one Qdrant and one database (see
docs/operations.md, "Running several replicas")."""

from __future__ import annotations

from pydantic import BaseModel, Field


class FleetSettings(BaseModel):
    """What replicas share: the corpus write lease, idle ingest streams."""

    ingest_idle_timeout: float = Field(
        30.0,
        gt=0,
        description="Seconds an IngestDocuments stream may send nothing before it is ended "
        "with DEADLINE_EXCEEDED (what was written until then stays and is reported).",
    )
    corpus_lease_ttl: float = Field(
        15.0,
        ge=1,
        description="Seconds the corpus write lease (one document written at a time per "
        "collection, across every replica and `ragagent ingest`) lasts unless its holder "
        "renews it; how long a writer that died blocks the others. Qdrant server only.",
    )
    corpus_lease_wait: float = Field(
        120.0,
        gt=0,
        description="Longest a corpus writer waits for another's write lease before it "
        "gives up with UNAVAILABLE (it logs that it waits).",
    )
    turn_lease: float = Field(
        30.0,
        ge=3,
        description="Seconds a running turn holds its session without renewal; its replica "
        "renews it every third of that. A replica that dies leaves its sessions usable again "
        "after this, and its turn is recorded as ERROR.",
    )
