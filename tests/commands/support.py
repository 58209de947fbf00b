"""Running the ingest and eval commands in-process, as the CLI would, with captured output."""

from __future__ import annotations

import argparse
import io
import json
from dataclasses import dataclass
from typing import Any

from service.commands import evaluate, ingest
from service.config import Settings
from tests.corpus.support import open_test_runtime


def parse(*argv: str) -> argparse.Namespace:
    """Parses like ``ragagent`` does once its COMMANDS include ingest and evaluate."""
    parser = argparse.ArgumentParser(prog="ragagent")
    commands = parser.add_subparsers(dest="command", required=True)
    ingest.register(commands)
    evaluate.register(commands)
    return parser.parse_args(argv)


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def run(settings: Settings, *argv: str, tty: bool = False) -> Result:
    """Runs one command with the session's embedding model; ``tty`` fakes a terminal."""
    args = parse(*argv)
    out = _Terminal() if tty else io.StringIO()
    err = io.StringIO()
    command = ingest.ingest_command if args.run is ingest.run_ingest else evaluate.eval_command
    code = await command(args, settings=settings, open_runtime=open_test_runtime, out=out, err=err)
    return Result(code, out.getvalue(), err.getvalue())
