"""Reading a docs folder from disk as source documents."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SUFFIXES = (".md", ".mdx")


@dataclass(frozen=True, slots=True)
class SourceDocument:
    """One page: its path relative to the corpus root ("/" separators, the document id)
    and its text."""

    path: str
    content: str


class SourceDecodeError(ValueError):
    """A file is not valid UTF-8; the message names it and the offending byte offset."""


def iter_source_paths(root: Path) -> list[Path]:
    """The Markdown files under ``root`` that Docusaurus publishes, sorted by document id.

    Like Docusaurus, files and folders whose names start with ``_`` are skipped (partials,
    templates); so are hidden ones starting with ``.``.
    """
    if not root.is_dir():
        raise NotADirectoryError(f"not a folder: {root}")
    found: list[Path] = []
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if any(part.startswith(("_", ".")) for part in relative.parts):
            continue
        if path.suffix.lower() in SUFFIXES and path.is_file():
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def load_documents(root: Path) -> Iterator[SourceDocument]:
    """Yields the pages under ``root`` in document-id order, reading each lazily."""
    root = root.resolve()
    for path in iter_source_paths(root):
        document_id = path.relative_to(root).as_posix()
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise SourceDecodeError(
                f"{path}: not valid UTF-8 (byte {exc.start}: {raw[exc.start : exc.start + 1]!r})"
            ) from exc
        yield SourceDocument(document_id, text)
