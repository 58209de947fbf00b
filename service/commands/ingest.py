"""``ragagent ingest PATH``: index a docs folder, in this process or through a running server.

Without ``--address`` the command opens the store itself, which the embedded store allows
only while no server has it open; with ``--address`` it streams the files to the server's
CorpusService. Both report the same summary, so scripts do not care which ran.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import grpc
from ragagent.v1 import corpus_pb2

from service.api.corpus import IngestTally, ingest_response
from service.api.interceptors import validate
from service.commands.flags import Flag, settings_with_flags
from service.commands.serve import local_target
from service.config import Settings
from service.errors import InvalidArgument
from service.ingest.loader import SourceDocument, SourceFolder
from service.ingest.pipeline import DocumentStatus, IngestEvent, Ingestor
from service.ingest.remote import ingest_remote
from service.observability.logging import configure_logging

if TYPE_CHECKING:  # the server (and rich) load slowly: imported where used, for start-up time
    from rich.progress import Progress

    from service.server import Runtime

RuntimeOpener = Callable[[Settings], Awaitable["Runtime"]]


@dataclass(frozen=True, slots=True)
class IngestOutcome:
    """What an ingest did, wherever it ran."""

    response: corpus_pb2.IngestDocumentsResponse
    warnings: list[str] = field(default_factory=list)
    # Files left out on this side (unreadable, or links out of the folder), one line each.
    skipped: list[str] = field(default_factory=list)

    @property
    def all_warnings(self) -> list[str]:
        return [*self.skipped, *self.warnings]

    def to_dict(self) -> dict[str, Any]:
        r = self.response
        return {
            "added": r.documents_added,
            "updated": r.documents_updated,
            "unchanged": r.documents_unchanged,
            "deleted": r.documents_deleted,
            "chunks_written": r.chunks_written,
            "chunks_deleted": r.chunks_deleted,
            "skipped": len(self.skipped),
            "duration_s": round(r.duration.ToNanoseconds() / 1e9, 3),
            "warnings": self.all_warnings,
        }


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
    parser.add_argument("--json", action="store_true", help="print one JSON object, no table")
    parser.add_argument(
        "--timeout", type=float, help="seconds a remote ingest may take (default: no limit)"
    )
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
    """The command with its dependencies given: the exit code, the report on ``out``."""
    out = out or sys.stdout
    err = err or sys.stderr
    root: Path = args.path
    problem = _usage_problem(root, args.base_url)
    if problem:
        print(f"ragagent: {problem}", file=err)
        return 2
    show_progress = not args.json and out.isatty()
    folder = SourceFolder(root, follow_symlinks=args.follow_symlinks)
    try:
        with _progress(out, len(folder), enabled=show_progress, chunks=not args.address) as view:
            if args.address:
                outcome = await _through_server(args, iter(folder), view)
            else:
                outcome = await ingest_local(
                    iter(folder),
                    settings,
                    base_url=args.base_url,
                    prune=args.prune,
                    open_runtime=open_runtime,
                    progress=view.ingested,
                )
    except grpc.aio.AioRpcError as error:
        print("\n".join(rpc_error_lines(error)), file=err)
        return 1
    outcome = replace(outcome, skipped=folder.skipped)
    if args.json:
        print(json.dumps(outcome.to_dict()), file=out)
    else:
        _render(outcome, out)
    return 0


def _usage_problem(root: Path, base_url: str) -> str:
    """Why the arguments cannot work, checked before anything is opened; empty when fine."""
    if root.is_file():
        # Not accepted as a one-file corpus: its document id would lose the folders that
        # the same page has when its folder is ingested, and --prune would empty the rest.
        return f"{root} is a file; ingest takes the folder of the documents (PATH)"
    if not root.is_dir():
        return f"{root}: no such folder"
    try:
        # The contract's own rule, so that both ways of ingesting accept the same URLs.
        validate(corpus_pb2.IngestOptions(base_url=base_url))
    except InvalidArgument as error:
        return f"--base-url: {error.violations[0].description}"
    return ""


async def ingest_local(
    documents: Iterator[SourceDocument],
    settings: Settings,
    *,
    base_url: str = "",
    prune: bool = False,
    open_runtime: RuntimeOpener | None = None,
    progress: Callable[[IngestEvent], None] | None = None,
) -> IngestOutcome:
    """Ingests in this process over the store the settings name, then closes it."""
    if open_runtime is None:
        from service.server import Runtime

        open_runtime = Runtime.open
    runtime = await open_runtime(settings)
    try:
        ingestor = Ingestor(runtime.embedder, runtime.store)
        tally = IngestTally(then=progress)
        summary = await ingestor.ingest(documents, base_url=base_url, prune=prune, progress=tally)
    finally:
        await runtime.close()
    return IngestOutcome(
        ingest_response(summary, tally, duration_s=summary.duration_s), summary.warnings
    )


async def _through_server(
    args: argparse.Namespace, documents: Iterator[SourceDocument], view: _ProgressView
) -> IngestOutcome:
    async with grpc.aio.insecure_channel(local_target(args.address)) as channel:
        response = await ingest_remote(
            channel,
            documents,
            base_url=args.base_url,
            prune=args.prune,
            timeout=args.timeout,
            on_sent=view.sent,
        )
    return IngestOutcome(response, list(response.warnings))


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


class _ProgressView:
    """Documents and chunks done, on a rich progress bar; does nothing when disabled."""

    def __init__(self, progress: Progress | None, total: int, *, chunks: bool) -> None:
        self._progress = progress
        if progress is not None:
            self._documents = progress.add_task("documents", total=total)
            self._chunks = progress.add_task("chunks", total=None) if chunks else None

    def ingested(self, event: IngestEvent) -> None:
        if self._progress is None:
            return
        if event.status is not DocumentStatus.DELETED:  # pruned ones are not under PATH
            self._progress.advance(self._documents)
        if self._chunks is not None:
            self._progress.advance(self._chunks, event.chunks_written)

    def sent(self, document: SourceDocument) -> None:
        if self._progress is not None:
            self._progress.advance(self._documents)


@contextmanager
def _progress(out: TextIO, total: int, *, enabled: bool, chunks: bool) -> Iterator[_ProgressView]:
    if not enabled:
        yield _ProgressView(None, total, chunks=chunks)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    columns = ("{task.description:>9}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(file=out), transient=True) as bar:
        yield _ProgressView(bar, total, chunks=chunks)


def _render(outcome: IngestOutcome, out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    counts = outcome.to_dict()
    table = Table(title="ingest", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name in (
        "added",
        "updated",
        "unchanged",
        "deleted",
        "skipped",
        "chunks_written",
        "chunks_deleted",
    ):
        table.add_row(name.replace("_", " "), str(counts[name]))
    table.add_row("duration", f"{counts['duration_s']:.1f} s")
    table.add_row("warnings", str(len(counts["warnings"])))
    console = Console(file=out)
    console.print(table)
    for warning in counts["warnings"]:
        console.print(f"warning: {warning}", markup=False, highlight=False)
