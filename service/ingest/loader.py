"""Reading a docs folder from disk as source documents.

A file that cannot be read as UTF-8 text is skipped with a warning rather than ending the
run: one stray Latin-1 page should not keep the other pages out of the index.

Symbolic links are followed only where they stay inside the folder, unless asked: a link
to a file elsewhere (``~/.ssh/notes.md``, another project) would otherwise be indexed and
served to anyone who can ask a question. A link to a folder inside the folder is never
followed (its files are read under their real path already), which also rules out loops.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from service.observability.logging import get_logger

SUFFIXES = (".md", ".mdx")

log = get_logger("ragagent.ingest")


@dataclass(frozen=True, slots=True)
class SourceDocument:
    """One page: its path relative to the corpus root ("/" separators, the document id)
    and its text."""

    path: str
    content: str


class SourceDecodeError(ValueError):
    """A file is not valid UTF-8; the message names it and the offending byte offset."""


def read_source(path: Path, document_id: str) -> str:
    """The file's text (a UTF-8 byte-order mark dropped); SourceDecodeError when it is not
    UTF-8, OSError when it cannot be read."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        offending = raw[exc.start : exc.start + 1]
        raise SourceDecodeError(
            f"{document_id}: not valid UTF-8 (byte {exc.start}: {offending!r})"
        ) from exc


class SourceFolder:
    """The Markdown files under ``root`` that Docusaurus publishes, in document-id order.

    Like Docusaurus, files and folders whose names start with ``_`` are skipped (partials,
    templates); so are hidden ones starting with ``.``. The folder is listed once, when
    the object is made; files are read one at a time as it is iterated. ``skipped`` holds
    one line per file (or linked folder) left out, saying why; it grows during iteration,
    and ``on_skip`` is called with each line as it is added.
    """

    def __init__(
        self,
        root: Path,
        *,
        follow_symlinks: bool = False,
        on_skip: Callable[[str], None] | None = None,
    ) -> None:
        if not root.is_dir():
            raise NotADirectoryError(f"not a folder: {root}")
        self.root = root
        self.follow_symlinks = follow_symlinks
        self.skipped: list[str] = []
        self._on_skip = on_skip
        self._real_root = root.resolve()
        self._visited = {self._real_root}
        self._files: list[tuple[str, Path]] = []
        self._walk(root, "")
        self._files.sort(key=lambda item: item[0])

    def __len__(self) -> int:
        """Files found (those that turn out unreadable included)."""
        return len(self._files)

    def __iter__(self) -> Iterator[SourceDocument]:
        for document_id, path in self._files:
            try:
                text = read_source(path, document_id)
            except SourceDecodeError as error:
                self._skip(f"{error}; skipped")
                continue
            except OSError as error:
                self._skip(f"{document_id}: cannot be read ({error.strerror}); skipped")
                continue
            yield SourceDocument(document_id, text)

    def _skip(self, why: str) -> None:
        self.skipped.append(why)
        if self._on_skip is not None:
            self._on_skip(why)

    def _walk(self, folder: Path, prefix: str) -> None:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
        for entry in entries:
            if entry.name.startswith(("_", ".")):
                continue
            document_id = prefix + entry.name
            path = Path(entry.path)
            if entry.is_symlink():
                self._linked(path, document_id, is_dir=entry.is_dir())
            elif entry.is_dir(follow_symlinks=False):
                self._walk(path, document_id + "/")
            elif entry.is_file(follow_symlinks=False) and _is_markdown(entry.name):
                self._files.append((document_id, path))

    def _linked(self, path: Path, document_id: str, *, is_dir: bool) -> None:
        target = path.resolve()
        inside = target.is_relative_to(self._real_root)
        if is_dir:
            if inside or target in self._visited:
                return  # read under its real path already (or a loop)
            if not self.follow_symlinks:
                self._skip(
                    f"{document_id}/: links to a folder outside PATH; not followed "
                    "(--follow-symlinks follows it)"
                )
                return
            self._visited.add(target)
            self._walk(path, document_id + "/")
        elif path.is_file() and _is_markdown(path.name):  # a dangling link is no file
            if not inside and not self.follow_symlinks:
                self._skip(
                    f"{document_id}: links to a file outside PATH; skipped "
                    "(--follow-symlinks reads it)"
                )
                return
            self._files.append((document_id, path))


def _is_markdown(name: str) -> bool:
    return name.lower().endswith(SUFFIXES)


def load_documents(root: Path, *, follow_symlinks: bool = False) -> Iterator[SourceDocument]:
    """Yields the pages under ``root`` in document-id order, reading each lazily; skipped
    files are logged (use :class:`SourceFolder` to collect them)."""
    return iter(SourceFolder(root, follow_symlinks=follow_symlinks, on_skip=_log_skip))


def _log_skip(why: str) -> None:
    log.warning("source skipped", reason=why)
