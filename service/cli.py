"""The ``ragagent`` command: serve, ingest, eval, ask."""

from __future__ import annotations

import argparse
import asyncio
import sys
import textwrap
from collections.abc import Sequence

from service.config import Settings, describe_settings, load_settings
from service.errors import ConfigurationError, RagAgentError
from service.observability.logging import configure_logging


def _settings_epilog() -> str:
    lines = ["settings (environment variables, also read from ./.env):"]
    for env, default, description in describe_settings():
        lines.append(f"  {env}  [default: {default}]")
        lines.extend(
            textwrap.wrap(description, 88, initial_indent="      ", subsequent_indent="      ")
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragagent",
        description="Answers questions about a body of documents over gRPC.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the gRPC server",
        epilog=_settings_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--address", help="HOST:PORT to listen on (RAGAGENT_ADDRESS)")
    health = commands.add_parser(
        "health", help="exit 0 when the server answers SERVING (for container health checks)"
    )
    health.add_argument("--address", help="HOST:PORT of the server (RAGAGENT_ADDRESS)")
    health.add_argument("--service", default="", help="service name to check (default: all)")
    health.add_argument("--timeout", type=float, default=3.0, help="seconds to wait")
    return parser


async def _health(address: str, service: str, wait_s: float) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    host, _, port = address.rpartition(":")
    # A server bound to every interface is reached on loopback from inside its container.
    target = f"{'127.0.0.1' if host in ('0.0.0.0', '[::]', '') else host}:{port}"  # noqa: S104
    async with grpc.aio.insecure_channel(target) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=wait_s
            )
        except grpc.aio.AioRpcError as error:
            print(f"ragagent: health check failed: {error.code().name}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(status)
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


def _load(**overrides: object) -> Settings:
    return load_settings(**{k: v for k, v in overrides.items() if v is not None})


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            settings = _load(address=args.address)
            configure_logging(settings.log_level, settings.log_format)
            from service.server import serve

            asyncio.run(serve(settings))
            return 0
        if args.command == "health":
            settings = _load(address=args.address)
            return asyncio.run(_health(settings.address, args.service, args.timeout))
    except ConfigurationError as exc:
        print(f"ragagent: {exc}", file=sys.stderr)
        return 2
    except RagAgentError as exc:
        print(f"ragagent: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
