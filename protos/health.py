"""grpc.health.v1 and reflection (grpc.reflection.v1 and v1alpha) for specfleet's gRPC servers
(gateway and worker).

Health answers for the whole server ("") and for the specfleet service by name, always
together: load balancers and Ray probes ask for either. Reflection is served under both
names: current grpcurl and Postman ask for v1, older tools for v1alpha. grpcio-reflection ships
only v1alpha, and v1 is the same protocol renamed (identical messages and field numbers), so
the v1 method decodes and encodes with the v1alpha messages and shares their servicer.
Imports grpc only, never mlx.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2
from grpc_reflection.v1alpha._async import ReflectionServicer

REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"


class ServerHealth:
    """Adds the health servicer and reflection to `server`; `set_serving` toggles both names."""

    def __init__(self, server: grpc.aio.Server, service_name: str) -> None:
        self.service_name = service_name
        self._servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, server)
        names = (service_name, health.SERVICE_NAME, REFLECTION_V1, reflection.SERVICE_NAME)
        servicer = ReflectionServicer(names)
        method = grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
        for name in (REFLECTION_V1, reflection.SERVICE_NAME):
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": method}),)
            )

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", self.service_name):
            await self._servicer.set(name, status)
