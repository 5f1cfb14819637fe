"""grpc.health.v1 and reflection for specfleet's gRPC servers (gateway and worker).

Health answers for the whole server ("") and for the specfleet service by name, always
together: load balancers and Ray probes ask for either. Imports grpc only, never mlx.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection


class ServerHealth:
    """Adds the health servicer and reflection to `server`; `set_serving` toggles both names."""

    def __init__(self, server: grpc.aio.Server, service_name: str) -> None:
        self.service_name = service_name
        self._servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, server)
        reflection.enable_server_reflection(
            (service_name, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", self.service_name):
            await self._servicer.set(name, status)
