"""``ragagent serve`` and ``ragagent health``."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.commands.channel import (
    add_connection_flags,
    connection,
    connection_hint,
    open_channel,
)
from service.commands.flags import Flag, settings_with_flags
from service.config import describe_settings
from service.observability.logging import configure_logging

# Where --web serves the widget when no HTTP address is given.
DEFAULT_WEB_ADDRESS = "127.0.0.1:8080"


def settings_epilog() -> str:
    lines = ["settings (environment variables, also read from ./.env):"]
    for env, default, description in describe_settings():
        lines.append(f"  {env}  [default: {default}]")
        lines.extend(
            textwrap.wrap(description, 88, initial_indent="      ", subsequent_indent="      ")
        )
    return "\n".join(lines)


def register(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the gRPC server",
        epilog=settings_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--address", help="HOST:PORT to listen on (RAGAGENT_ADDRESS)")
    serve.add_argument(
        "--http-address",
        help="HOST:PORT of the HTTP listener: Connect, gRPC-Web, JSON (RAGAGENT_HTTP_ADDRESS)",
    )
    serve.add_argument(
        "--web",
        action="store_true",
        default=None,
        help="serve the chat widget at / of the HTTP listener (RAGAGENT_HTTP_WEB; "
        "the listener defaults to 127.0.0.1:8080 then)",
    )
    serve.set_defaults(run=run_serve)

    health = commands.add_parser(
        "health", help="exit 0 when the server answers SERVING (for container health checks)"
    )
    health.add_argument("--address", help="HOST:PORT of the server (RAGAGENT_ADDRESS)")
    health.add_argument("--service", default="", help="service name to check (default: all)")
    health.add_argument("--timeout", type=float, default=3.0, help="seconds to wait")
    add_connection_flags(health)
    health.set_defaults(run=run_health)


async def run_serve(args: argparse.Namespace) -> int:
    settings = settings_with_flags(
        Flag("--address", "address", args.address),
        Flag("--http-address", "http_address", args.http_address),
        Flag("--web", "http_web", args.web),
    )
    if settings.http_web and not settings.http_address:
        settings = settings.model_copy(update={"http_address": DEFAULT_WEB_ADDRESS})
    configure_logging(settings.log_level, settings.log_format)
    # Imported once the settings are valid: a bad one is reported before the server's
    # libraries load (seconds of start-up).
    from service.server import serve

    await serve(settings)
    return 0


async def run_health(args: argparse.Namespace) -> int:
    settings = settings_with_flags(Flag("--address", "address", args.address))
    conn = connection(args, settings.address)
    async with open_channel(conn) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
        except grpc.aio.AioRpcError as error:
            print(f"ragagent: health check failed: {error.code().name}", file=sys.stderr)
            if (hint := connection_hint(error, conn)) is not None:
                print(f"ragagent: {hint}", file=sys.stderr)
            return 1
    print(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1
