"""Reading simple API pages in either form, as pip reads them."""

from __future__ import annotations

import json

import pytest

from service.provision.index import parse_links
from service.provision.pipconfig import redact

PAGE = "https://index.example/simple/demo/"


def test_html_links_resolve_against_the_page_or_its_base() -> None:
    body = b"""<!DOCTYPE html><html><body>
    <a href="../../files/demo-1.0.tar.gz#sha256=aa11">demo-1.0.tar.gz</a>
    <a href="https://cdn.example/p/demo-1.0-py3-none-any.whl?x=1&amp;y=2#md5=bb">wheel</a>
    <a name="no-href">nothing</a>
    <a href="demo%2B1-2.0.zip">quoted</a>
    </body></html>"""
    assert parse_links(body, PAGE) == [
        ("demo-1.0.tar.gz", "https://index.example/files/demo-1.0.tar.gz", "aa11"),
        (
            "demo-1.0-py3-none-any.whl",
            "https://cdn.example/p/demo-1.0-py3-none-any.whl?x=1&y=2",
            None,
        ),
        ("demo+1-2.0.zip", "https://index.example/simple/demo/demo%2B1-2.0.zip", None),
    ]
    based = b'<html><head><base href="/mirror/"></head><a href="demo-1.0.tar.gz">x</a></html>'
    assert parse_links(based, PAGE) == [
        ("demo-1.0.tar.gz", "https://index.example/mirror/demo-1.0.tar.gz", None)
    ]


def test_json_is_recognised_by_its_body_and_urls_may_be_relative() -> None:
    files = [
        {
            "filename": "demo-1.0.tar.gz",
            "url": "../../files/demo-1.0.tar.gz",
            "hashes": {"sha256": "cc"},
        },
        {"filename": "demo-1.0-py3-none-any.whl", "url": "https://cdn.example/w.whl", "hashes": {}},
    ]
    body = b"\n  " + json.dumps({"meta": {"api-version": "1.1"}, "files": files}).encode()
    assert parse_links(body, PAGE) == [
        ("demo-1.0.tar.gz", "https://index.example/files/demo-1.0.tar.gz", "cc"),
        ("demo-1.0-py3-none-any.whl", "https://cdn.example/w.whl", None),
    ]


def test_json_that_is_no_simple_api_page_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a simple API page"):
        parse_links(b'{"detail": "rate limited"}', PAGE)


def test_file_index_links_resolve_to_files_on_disk() -> None:
    body = b'<a href="../../files/demo-1.0.tar.gz#sha256=dd">demo</a>'
    page = "file:///opt/pypi/simple/demo/index.html"
    assert parse_links(body, page) == [
        ("demo-1.0.tar.gz", "file:///opt/pypi/files/demo-1.0.tar.gz", "dd")
    ]


def test_passwords_never_reach_messages() -> None:
    assert (
        redact("https://me:s3cret@index.example/simple") == "https://me:****@index.example/simple"
    )
    assert redact("https://token@index.example/simple") == "https://token@index.example/simple"
