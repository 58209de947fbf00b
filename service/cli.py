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
        lines.extend(textwrap.wrap(description, 88, initial_indent="      ", subsequent_indent="      "))
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
    return parser


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
