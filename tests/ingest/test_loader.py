"""Walking a docs folder like Docusaurus does."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.ingest.loader import SourceDecodeError, SourceDocument, load_documents


def write(root: Path, relative: str, content: str | bytes) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


def test_walks_markdown_sorted_and_skips_partials(tmp_path: Path) -> None:
    write(tmp_path, "b/page.mdx", "B")
    write(tmp_path, "a/z.md", "Z")
    write(tmp_path, "a/index.MD", "I")
    write(tmp_path, "_partials/part.md", "skip")
    write(tmp_path, "a/_draft.md", "skip")
    write(tmp_path, ".hidden/x.md", "skip")
    write(tmp_path, "a/.notes.md", "skip")
    write(tmp_path, "a/_category_.json", "{}")
    write(tmp_path, "a/image.png", b"\x89PNG")
    write(tmp_path, "top.md", "\ufeffT")
    assert list(load_documents(tmp_path)) == [
        SourceDocument("a/index.MD", "I"),
        SourceDocument("a/z.md", "Z"),
        SourceDocument("b/page.mdx", "B"),
        SourceDocument("top.md", "T"),
    ]


def test_decode_error_names_the_file(tmp_path: Path) -> None:
    write(tmp_path, "ok.md", "fine")
    write(tmp_path, "sub/broken.md", b"caf\xe9 latin-1")
    documents = load_documents(tmp_path)
    assert next(documents).path == "ok.md"
    with pytest.raises(SourceDecodeError, match=r"sub/broken\.md: not valid UTF-8 \(byte 3"):
        next(documents)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        list(load_documents(tmp_path / "nope"))
