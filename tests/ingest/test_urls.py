"""Docusaurus URL rules and module/chapter placement."""

from __future__ import annotations

import pytest

from service.ingest.urls import Placement, page_url, placement, strip_number_prefix

BASE = "https://robots.example"


@pytest.mark.parametrize(
    ("document_id", "slug", "expected"),
    [
        ("intro.md", None, "/docs/intro"),
        ("intro.md", "/", "/docs/"),
        ("00-introduction/INTRODUCTION.md", None, "/docs/introduction/INTRODUCTION"),
        ("module-01-basics/chapter-02-io/page-03-pins.md", None,
         "/docs/module-01-basics/chapter-02-io/page-03-pins"),
        ("01-start/02-setup/03-install.mdx", None, "/docs/start/setup/install"),
        ("2024-notes/5.md", None, "/docs/notes/5"),
        ("guides/index.md", None, "/docs/guides"),
        ("guides/README.mdx", None, "/docs/guides"),
        ("guides/Readme.md", None, "/docs/guides"),
        ("02-guides/02-guides.md", None, "/docs/guides"),
        ("guides/Guides.md", None, "/docs/guides"),
        ("01-guides/guides.md", None, "/docs/guides/guides"),
        ("index.md", None, "/docs/"),
        ("guides/page.md", "/custom/place", "/docs/custom/place"),
        ("01-guides/page.md", "renamed", "/docs/guides/renamed"),
        ("guides/deep/page.md", "../up", "/docs/guides/up"),
        ("guides/page.md", "  ", "/docs/guides/page"),
    ],
)  # fmt: skip
def test_page_urls(document_id: str, slug: str | None, expected: str) -> None:
    assert page_url(BASE, document_id, slug) == BASE + expected


def test_trailing_slash_and_path_in_base_url() -> None:
    assert page_url("https://x.dev/", "a/b.md") == "https://x.dev/docs/a/b"
    assert page_url("https://x.dev/book/", "a.md") == "https://x.dev/book/docs/a"


def test_empty_base_url_gives_no_url() -> None:
    assert page_url("", "a/b.md") == ""
    assert page_url("   ", "a/b.md", "/x") == ""


@pytest.mark.parametrize(
    ("segment", "expected"),
    [("00-introduction", "introduction"), ("module-01-x", "module-01-x"), ("10-", "10-"),
     ("7-up", "up"), ("2024", "2024"), ("v1-2", "v1-2")],
)  # fmt: skip
def test_strip_number_prefix(segment: str, expected: str) -> None:
    assert strip_number_prefix(segment) == expected


@pytest.mark.parametrize(
    ("document_id", "expected"),
    [
        ("module-02-twin/chapter-04-gz/page-11.md", Placement("module-02-twin", "chapter-04-gz")),
        ("module-03-brain/page.md", Placement("module-03-brain", "")),
        ("appendix/troubleshooting.mdx", Placement("", "")),
        ("intro.md", Placement("", "")),
        ("00-introduction/INTRODUCTION.md", Placement("", "")),
        ("extras/chapter-99-misc/page.md", Placement("", "chapter-99-misc")),
    ],
)  # fmt: skip
def test_placement(document_id: str, expected: Placement) -> None:
    assert placement(document_id) == expected
