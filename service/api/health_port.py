"""The plaintext health-only listener (RAGAGENT_HEALTH_ADDRESS).

Kubernetes' ``grpc:`` probes, Docker's HEALTHCHECK and Envoy's gRPC health checks cannot
present a client certificate, and Kubernetes' cannot speak TLS at all. With TLS (and mutual
TLS) on the main port, they call this port instead: a second grpc.aio server registering
only grpc.health.v1, sharing the main server's ``HealthServicer``, so that both report the
same status and this one turns NOT_SERVING the moment a shutdown begins. It answers no other
service: all it tells a caller is whether the server is serving. Server reflection lists the
health service alone, because grpcurl (the image's HEALTHCHECK) needs it to call Check.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from service.errors import ConfigurationError


class HealthPort:
    """grpc.health.v1 alone, plaintext, on ``address``; ``port`` is the bound port."""

    def __init__(self, address: str, health: HealthServicer) -> None:
        self._address = address
        # A probe sends one tiny message; nothing here needs large messages or keepalives.
        self._server = grpc.aio.server(
            options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 4096)]
        )
        health_pb2_grpc.add_HealthServicer_to_server(health, self._server)
        reflection.enable_server_reflection(
            [health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
            self._server,
        )
        self.port = 0

    async def start(self) -> int:
        try:
            self.port = self._server.add_insecure_port(self._address)
        except RuntimeError as exc:
            raise ConfigurationError(
                f"cannot listen on {self._address} (RAGAGENT_HEALTH_ADDRESS): {exc}; is "
                "another server using that port?"
            ) from None
        await self._server.start()
        return self.port

    async def stop(self) -> None:
        # Called after the main server has drained: probes saw NOT_SERVING all along.
        await self._server.stop(0)
