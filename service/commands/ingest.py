"""``ragagent ingest PATH``: index a docs folder, in this process or through a running server.

Without ``--address`` the command opens the store itself, which the embedded store allows
only while no server has it open; with ``--address`` it streams the files to the server's
CorpusService. Both report the same summary, so scripts do not care which ran.

SIGINT or SIGTERM stop either within a second or so (see :mod:`service.commands.interrupt`)
with a line saying what was committed; documents are written whole and unchanged ones are
skipped, so running the command again finishes the job.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import grpc
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc

from service.access import LabelError, labels
from service.api.corpus import IngestTally, ingest_response
from service.api.interceptors import validate
from service.commands.channel import Connection, add_connection_flags, connection, open_channel
from service.commands.flags import Flag, settings_with_flags
from service.commands.ingest_report import IngestOutcome, ProgressView, progress_view, render
from service.commands.interrupt import Interrupted, until_signalled
from service.config import Settings
from service.errors import InvalidArgument
from service.ingest.loader import SourceDocument, SourceFolder
from service.ingest.outcome import IngestEvent
from service.ingest.remote import ingest_remote
from service.observability.logging import configure_logging

if TYPE_CHECKING:  # the server loads slowly: imported where used, for start-up time
    from service.runtime import Runtime

__all__ = [
    "IngestOutcome",
    "add_access_flags",
    "ingest_command",
    "ingest_local",
    "register",
    "rpc_error_lines",
    "usage_problem",
]

RuntimeOpener = Callable[[Settings], Awaitable["Runtime"]]
# How long an interrupted ingest through a server waits to learn the index's size.
INDEX_SIZE_TIMEOUT_S = 1.0
# How long an interrupted ingest in this process waits for its runtime to close.
CLOSE_AFTER_CANCEL_S = 1.0


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "ingest",
        help="index a folder of Markdown/MDX documents",
        description="Chunks, embeds and stores the .md/.mdx files under PATH. Unchanged files "
        "are skipped, so re-running is cheap.",
    )
    parser.add_argument("path", type=Path, metavar="PATH", help="root folder of the documents")
    parser.add_argument(
        "--base-url", default="", help="site URL the pages are published under (for links)"
    )
    parser.add_argument(
        "--address",
        help="HOST:PORT of a running server to ingest through (default: open the store here)",
    )
    parser.add_argument(
        "--prune", action="store_true", help="delete indexed documents that are not under PATH"
    )
    parser.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="also read files and folders that symbolic links lead to outside PATH",
    )
    add_access_flags(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object, no table")
    parser.add_argument(
        "--timeout", type=float, help="seconds a remote ingest may take (default: no limit)"
    )
    add_connection_flags(parser)
    parser.set_defaults(run=run_ingest)


async def run_ingest(args: argparse.Namespace) -> int:
    # --address is checked like the setting it stands for, so that a typo is named as the
    # flag; only the flag's value is used (the local store does not need an address).
    settings = settings_with_flags(Flag("--address", "address", args.address))
    # Logs go to stderr, so that stdout holds only the report (and --json stays parseable).
    configure_logging(settings.log_level, settings.log_format)
    return await ingest_command(args, settings=settings)


async def ingest_command(
    args: argparse.Namespace,
    *,
    settings: Settings,
    open_runtime: RuntimeOpener | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """The command with its dependencies given: the exit code, the report on ``out``.

    Raises :class:`Interrupted` when SIGINT or SIGTERM stopped it, having said on ``err``
    what was committed.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    root: Path = args.path
    problem = usage_problem(root, args.base_url, _access(args))
    if problem:
        print(f"ragagent: {problem}", file=err)
        return 2
    show_progress = not args.json and out.isatty()
    folder = SourceFolder(root, follow_symlinks=args.follow_symlinks)
    remote = _Remote(connection(args, args.address), args.timeout) if args.address else None
    try:
        with progress_view(out, len(folder), enabled=show_progress, chunks=not remote) as view:
            if remote is not None:
                work = remote.ingest(iter(folder), args, view)
            else:
                work = ingest_local(
                    iter(folder),
                    settings,
                    base_url=args.base_url,
                    prune=args.prune,
                    access=labels(args.group, args.principal),
                    open_runtime=open_runtime,
                    progress=view.ingested,
                )
            outcome = await until_signalled(work)
    except grpc.aio.AioRpcError as error:
        print("\n".join(rpc_error_lines(error)), file=err)
        return 1
    except Interrupted as stopped:  # said once the progress bar is gone
        if remote is not None:
            size = await remote.index_size()
            where = view.stopped_remote(stopped.signal_name, size, prune=args.prune)
        else:
            where = view.stopped_local(stopped.signal_name)
        print(f"ragagent: {where}", file=err, flush=True)
        raise
    outcome = replace(outcome, skipped=folder.skipped)
    if args.json:
        print(json.dumps(outcome.to_dict()), file=out)
    else:
        render(outcome, out)
    return 0


def add_access_flags(parser: argparse.ArgumentParser) -> None:
    """--group and --principal: who may read every document of the run."""
    for flag, what in (("--group", "group"), ("--principal", "principal")):
        parser.add_argument(
            flag,
            action="append",
            default=[],
            help=f"a {what} that may read every document ingested, besides those a page's "
            "front matter `access` names; repeatable (docs/security.md, Document permissions)",
        )


def _access(args: argparse.Namespace) -> corpus_pb2.DocumentAccess:
    return corpus_pb2.DocumentAccess(groups=args.group, principals=args.principal)


def usage_problem(root: Path, base_url: str, access: corpus_pb2.DocumentAccess) -> str:
    """Why the arguments cannot work, checked before anything is opened; empty when fine."""
    if root.is_file():
        # Not accepted as a one-file corpus: its document id would lose the folders that
        # the same page has when its folder is ingested, and --prune would empty the rest.
        return f"{root} is a file; ingest takes the folder of the documents (PATH)"
    if not root.is_dir():
        return f"{root}: no such folder"
    try:
        # The contract's own rule, so that both ways of ingesting accept the same URLs.
        validate(corpus_pb2.IngestOptions(base_url=base_url, access=access))
        labels(access.groups, access.principals)
    except InvalidArgument as error:
        violation = error.violations[0]
        flag = "--base-url" if violation.field.startswith("base_url") else "--group/--principal"
        return f"{flag}: {violation.description}"
    except LabelError as error:
        return f"--group/--principal: {error}"
    return ""


async def ingest_local(
    documents: Iterator[SourceDocument],
    settings: Settings,
    *,
    base_url: str = "",
    prune: bool = False,
    access: tuple[str, ...] = (),
    open_runtime: RuntimeOpener | None = None,
    progress: Callable[[IngestEvent], None] | None = None,
) -> IngestOutcome:
    """Ingests in this process over the store the settings name, then closes it."""
    if open_runtime is None:
        from service.runtime import Runtime

        open_runtime = Runtime.open
    runtime = await open_runtime(settings)
    try:
        # Other writers of a Qdrant server's collection (replicas, other ingests) wait
        # for this one's documents and it for theirs (the runtime's ingestor holds the lease).
        tally = IngestTally(then=progress)
        summary = await runtime.ingestor.ingest(
            documents, base_url=base_url, prune=prune, progress=tally, access=access
        )
    finally:
        await _close(runtime)
    return IngestOutcome(
        ingest_response(summary, tally, duration_s=summary.duration_s), summary.warnings
    )


async def _close(runtime: Runtime) -> None:
    """Closes the runtime; once the ingest was cancelled (by a signal), for a bounded time:
    closing waits for the blocking work in flight, typically an embedding batch that takes
    seconds and whose vectors nobody will store. What holds state (the store, the session
    database) is closed before that wait."""
    task = asyncio.current_task()
    if task is None or not task.cancelling():
        await runtime.close()
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CLOSE_AFTER_CANCEL_S):
            await runtime.close()


class _Remote:
    """Ingesting through a running server's CorpusService."""

    def __init__(self, server: Connection, timeout: float | None) -> None:
        self._server = server
        self._timeout = timeout

    async def ingest(
        self, documents: Iterator[SourceDocument], args: argparse.Namespace, view: ProgressView
    ) -> IngestOutcome:
        async with open_channel(self._server) as channel:
            response = await ingest_remote(
                channel,
                documents,
                base_url=args.base_url,
                prune=args.prune,
                access=_access(args),
                timeout=self._timeout,
                on_sent=view.on_sent,
            )
        return IngestOutcome(response, list(response.warnings))

    async def index_size(self) -> int | None:
        """How many documents the server's index holds; None when it does not say at once
        (an interrupted command must not hang on it)."""
        async with open_channel(self._server) as channel:
            try:
                stats = await corpus_pb2_grpc.CorpusServiceStub(channel).GetCorpusStats(
                    corpus_pb2.GetCorpusStatsRequest(), timeout=INDEX_SIZE_TIMEOUT_S
                )
            except grpc.aio.AioRpcError:
                return None
        return stats.document_count


def rpc_error_lines(error: grpc.aio.AioRpcError) -> list[str]:
    """``ragagent: CODE: message``, then one line per field violation of a BadRequest."""
    lines = [f"ragagent: {error.code().name}: {error.details()}"]
    if error.code() is grpc.StatusCode.INVALID_ARGUMENT:
        from google.rpc import error_details_pb2
        from grpc_status import rpc_status

        try:
            status = rpc_status.from_call(error)  # type: ignore[arg-type]  # an aio call is one
        except ValueError:  # details that do not match the status: show the message only
            status = None
        for detail in status.details if status is not None else ():
            bad_request = error_details_pb2.BadRequest()
            if detail.Unpack(bad_request):
                lines.extend(f"  {v.field}: {v.description}" for v in bad_request.field_violations)
    return lines
