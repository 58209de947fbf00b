"""The ``ragagent`` command. Each subcommand lives in ``service/commands/``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from service.commands import ask, demo, evaluate, ingest, keys, reindex, serve, sessions
from service.commands.interrupt import Interrupted
from service.errors import ConfigurationError, RagAgentError

COMMANDS = (serve, ask, demo, ingest, reindex, evaluate, keys, sessions)


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
    runner = asyncio.Runner()
    try:
        code: int = runner.run(args.run(args))
    except Interrupted as stopped:
        # Exit now, without closing the runner: that would wait for the worker threads to
        # finish what they were doing (an embedding batch takes seconds), work nobody wants
        # any more. The command has closed what holds state and said where it stopped.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(stopped.exit_code)
    except ConfigurationError as exc:
        print(f"ragagent: {exc}", file=sys.stderr)
        return 2
    except RagAgentError as exc:
        print(f"ragagent: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        runner.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
