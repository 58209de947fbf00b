"""Settings of the health-only listener (docs/security.md, "Health checks")."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator


class HealthSettings(BaseModel):
    """A second, plaintext port that serves grpc.health.v1 and nothing else."""

    health_address: str = Field(
        "",
        description="HOST:PORT of a plaintext listener serving only grpc.health.v1 (Check "
        "and Watch, and reflection listing only that service, which grpcurl needs), for "
        "probes that cannot speak TLS or present a client certificate (Kubernetes grpc "
        "probes, Docker HEALTHCHECK) when the main port uses them. Empty = off. It reports "
        "the status of the main server and turns NOT_SERVING with it at shutdown. The image "
        "sets 0.0.0.0:50052.",
    )

    @field_validator("health_address")
    @classmethod
    def _check_health_address(cls, value: str) -> str:
        if not value:
            return value
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError("must be HOST:PORT, e.g. 0.0.0.0:50052, or empty (off)")
        return value
