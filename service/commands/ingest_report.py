"""What ``ragagent ingest`` shows: its progress, its summary, and where it stopped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from ragagent.v1 import corpus_pb2

from service.ingest.loader import SourceDocument
from service.ingest.outcome import DocumentStatus, IngestEvent

if TYPE_CHECKING:  # rich loads slowly: imported where used, for start-up time
    from rich.progress import Progress

COUNTS: tuple[str, ...] = ("added", "updated", "relabelled", "unchanged", "deleted", "skipped")
COUNTS += ("chunks_written", "chunks_deleted")


@dataclass(frozen=True, slots=True)
class IngestOutcome:
    """What an ingest did, wherever it ran."""

    response: corpus_pb2.IngestDocumentsResponse
    warnings: list[str] = field(default_factory=list)
    # Files left out on this side (unreadable, or links out of the folder), one line each.
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        r = self.response
        return {
            "added": r.documents_added,
            "updated": r.documents_updated,
            "relabelled": r.documents_relabelled,
            "unchanged": r.documents_unchanged,
            "deleted": r.documents_deleted,
            "chunks_written": r.chunks_written,
            "chunks_deleted": r.chunks_deleted,
            "skipped": len(self.skipped),
            "duration_s": round(r.duration.ToNanoseconds() / 1e9, 3),
            "warnings": [*self.skipped, *self.warnings],
        }


class ProgressView:
    """Counts the documents done (or sent) and shows them on a rich progress bar when
    there is one; the counts say where an interrupted ingest stopped."""

    def __init__(self, progress: Progress | None, total: int, *, chunks: bool) -> None:
        self.total = total
        self.written = 0  # stored (added, updated, or emptied)
        self.unchanged = 0
        self.deleted = 0
        self.sent = 0
        self._progress = progress
        if progress is not None:
            self._documents = progress.add_task("documents", total=total)
            self._chunks = progress.add_task("chunks", total=None) if chunks else None

    def ingested(self, event: IngestEvent) -> None:
        if event.status is DocumentStatus.DELETED:
            self.deleted += 1
        elif event.status is DocumentStatus.UNCHANGED:
            self.unchanged += 1
        else:
            self.written += 1
        if self._progress is None:
            return
        if event.status is not DocumentStatus.DELETED:  # pruned ones are not under PATH
            self._progress.advance(self._documents)
        if self._chunks is not None:
            self._progress.advance(self._chunks, event.chunks_written)

    def on_sent(self, document: SourceDocument) -> None:
        self.sent += 1
        if self._progress is not None:
            self._progress.advance(self._documents)

    def stopped_local(self, signal_name: str) -> str:
        """Where an ingest in this process stopped: each document is written whole, so
        what was written stays, and a rerun skips it as unchanged."""
        done = self.written + self.unchanged
        if done == 0 and self.deleted == 0:
            return (
                f"stopped by {signal_name} before any document was committed; nothing "
                "changed: run the same command again to ingest"
            )
        deleted = f", {self.deleted} pruned" if self.deleted else ""
        return (
            f"stopped by {signal_name}: {done} of {self.total} documents were committed "
            f"({self.written} written, {self.unchanged} unchanged{deleted}); "
            "run the same command again to finish the rest"
        )

    def stopped_remote(self, signal_name: str, index_size: int | None, *, prune: bool) -> str:
        """Where an ingest through a server stopped: the server keeps every document it had
        finished writing (it writes each whole) and never prunes after a cancelled stream."""
        holds = f"; the index holds {index_size} documents now" if index_size is not None else ""
        pruned = "; nothing was pruned" if prune else ""
        return (
            f"stopped by {signal_name} after sending {self.sent} of {self.total} documents: "
            f"the server keeps each one it had finished writing{holds}{pruned}; "
            "run the same command again to finish the rest"
        )


@contextmanager
def progress_view(
    out: TextIO, total: int, *, enabled: bool, chunks: bool
) -> Iterator[ProgressView]:
    if not enabled:
        yield ProgressView(None, total, chunks=chunks)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    columns = ("{task.description:>9}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(file=out), transient=True) as bar:
        yield ProgressView(bar, total, chunks=chunks)


def render(outcome: IngestOutcome, out: TextIO) -> None:
    """The summary as a table, then one line per warning."""
    from rich.console import Console
    from rich.table import Table

    counts = outcome.to_dict()
    table = Table(title="ingest", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name in COUNTS:
        table.add_row(name.replace("_", " "), str(counts[name]))
    table.add_row("duration", f"{counts['duration_s']:.1f} s")
    table.add_row("warnings", str(len(counts["warnings"])))
    console = Console(file=out)
    console.print(table)
    for warning in counts["warnings"]:
        console.print(f"warning: {warning}", markup=False, highlight=False)
