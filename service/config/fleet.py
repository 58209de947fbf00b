"""Settings of running several replicas over one Qdrant and one database (see
docs/operations.md, "Running several replicas")."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr


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
    limits_redis_url: SecretStr | None = Field(
        None,
        description="Redis URL (redis://host:6379/0) where every replica keeps the rate and "
        "stream limits per principal, so they hold for the whole fleet; unset = each replica "
        "counts on its own (N replicas admit N times the limits). If Redis fails, limits "
        "fall back to per replica with a WARNING.",
    )
    limits_redis_prefix: str = Field(
        "ragagent:limits:",
        min_length=1,
        description="Prefix of the limit keys in LIMITS_REDIS_URL (one per fleet sharing a Redis).",
    )
    limits_redis_timeout: float = Field(
        0.25,
        gt=0,
        description="Seconds to wait for Redis before a call is counted per replica instead.",
    )
    database_pgbouncer: bool = Field(
        False,
        description="DATABASE_URL points at PgBouncer in transaction mode: prepared-statement "
        "caches off and unique statement names (asyncpg's defaults fail there).",
    )
    # Off by default: behind a proxy (compose's Envoy) every caller has the proxy's
    # address, and one guesser would lock every caller out.
    auth_failures_per_minute: int = Field(
        0,
        ge=0,
        description="Failed authentications a peer address may make per minute (per replica) "
        "before its calls are refused with RESOURCE_EXHAUSTED unchecked; 0 = no limit. Only "
        "where callers connect directly: behind a proxy every caller shares its address.",
    )
    qdrant_shard_number: int | None = Field(
        None,
        ge=1,
        description="Shards of a collection created on a Qdrant cluster; unset = Qdrant's "
        "default (one per node). Applied only when the collection is created.",
    )
    qdrant_replication_factor: int | None = Field(
        None,
        ge=1,
        description="Copies of each shard on a Qdrant cluster (collections created by ragagent: "
        "chunks, records, leases); unset = Qdrant's default (1).",
    )
    qdrant_write_consistency_factor: int | None = Field(
        None,
        ge=1,
        description="Replicas that must confirm a write before Qdrant acknowledges it; at most "
        "QDRANT_REPLICATION_FACTOR; unset = Qdrant's default (1).",
    )

    qdrant_read_consistency: int | Literal["majority", "quorum", "all"] | None = Field(
        None,
        description="Replicas of a shard each search and read asks on a Qdrant cluster: a "
        "number, majority, quorum or all; unset = Qdrant's default (1: fastest, may miss a "
        "write another replica has not received yet). The corpus write lease always reads "
        "from a majority.",
    )

    @property
    def qdrant_cluster(self) -> dict[str, int]:
        """The creation parameters of a cluster's collections that are set."""
        chosen = {
            "shard_number": self.qdrant_shard_number,
            "replication_factor": self.qdrant_replication_factor,
            "write_consistency_factor": self.qdrant_write_consistency_factor,
        }
        return {name: value for name, value in chosen.items() if value is not None}
