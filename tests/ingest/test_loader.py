"""Walking a docs folder like Docusaurus does."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.ingest.loader import SourceDocument, SourceFolder, load_documents


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


def test_a_file_that_is_not_utf8_is_skipped_and_named(tmp_path: Path) -> None:
    write(tmp_path, "ok.md", "fine")
    write(tmp_path, "sub/broken.md", b"caf\xe9 latin-1")
    write(tmp_path, "sub/z.md", "after")
    folder = SourceFolder(tmp_path)
    assert len(folder) == 3
    assert [d.path for d in folder] == ["ok.md", "sub/z.md"]
    assert folder.skipped == ["sub/broken.md: not valid UTF-8 (byte 3: b'\\xe9'); skipped"]


def test_symlinks_out_of_the_folder_are_not_followed_unless_asked(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, "secret.md", "# Secret")
    write(outside, "more/other.md", "# Other")
    docs = tmp_path / "docs"
    write(docs, "page.md", "# Page")
    write(docs, "real/inner.md", "# Inner")
    (docs / "secret.md").symlink_to(outside / "secret.md")
    (docs / "linked").symlink_to(outside / "more", target_is_directory=True)
    (docs / "alias.md").symlink_to(docs / "page.md")  # stays inside: read
    (docs / "again").symlink_to(docs / "real", target_is_directory=True)  # inside: once
    (docs / "loop").symlink_to(docs, target_is_directory=True)
    (docs / "dangling.md").symlink_to(tmp_path / "gone.md")

    folder = SourceFolder(docs)
    assert [d.path for d in folder] == ["alias.md", "page.md", "real/inner.md"]
    assert folder.skipped == [
        "linked/: links to a folder outside PATH; not followed (--follow-symlinks follows it)",
        "secret.md: links to a file outside PATH; skipped (--follow-symlinks reads it)",
    ]

    followed = SourceFolder(docs, follow_symlinks=True)
    assert [d.path for d in followed] == [
        "alias.md",
        "linked/other.md",
        "page.md",
        "real/inner.md",
        "secret.md",
    ]
    assert followed.skipped == []


def test_a_loop_of_outside_links_is_walked_once(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, "a.md", "A")
    (outside / "back").symlink_to(outside, target_is_directory=True)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ext").symlink_to(outside, target_is_directory=True)
    assert [d.path for d in SourceFolder(docs, follow_symlinks=True)] == ["ext/a.md"]


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        list(load_documents(tmp_path / "nope"))
