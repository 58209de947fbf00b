"""The ``ragagent`` command. Each subcommand lives in ``service/commands/``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from service.commands import ask, demo, evaluate, ingest, serve
from service.errors import ConfigurationError, RagAgentError

COMMANDS = (serve, ask, demo, ingest, evaluate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragagent",
        description="Answers questions about a body of documents over gRPC.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(commands)
    return parser


def _version() -> str:
    try:
        return version("ragagent")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = asyncio.run(args.run(args))
    except ConfigurationError as exc:
        print(f"ragagent: {exc}", file=sys.stderr)
        return 2
    except RagAgentError as exc:
        print(f"ragagent: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
