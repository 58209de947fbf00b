"""Where a page is published and which module and chapter it belongs to.

URLs follow the Docusaurus docs plugin defaults (``routeBasePath: docs``): the path
without extension, number prefixes such as ``00-`` removed from every segment, index-like
files mapped to their folder, and a front-matter ``slug`` taking precedence.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

_NUMBER_PREFIX = re.compile(r"^\d+-(?=.)")
_INDEX_NAMES = frozenset({"index", "readme"})


@dataclass(frozen=True, slots=True)
class Placement:
    """A page's module and chapter folders; empty outside a module or chapter."""

    module: str = ""
    chapter: str = ""


def strip_number_prefix(segment: str) -> str:
    """``00-introduction`` -> ``introduction``; ``module-01-x`` and ``2024`` stay as they are."""
    return _NUMBER_PREFIX.sub("", segment)


def doc_route(document_id: str, slug: str | None = None) -> str:
    """The route below ``/docs/`` without leading slash ("" for the docs root)."""
    *folders, filename = document_id.strip("/").split("/")
    stem = filename.rsplit(".", 1)[0] if "." in filename else filename
    folder_route = [strip_number_prefix(f) for f in folders]
    if slug is not None and slug.strip():
        slug = slug.strip()
        if slug.startswith("/"):
            return _normalise(slug)
        # A relative slug is resolved against the folder the page lives in.
        return _normalise("/".join([*folder_route, slug]))
    # Docusaurus compares the raw folder name, so "00-intro/intro.md" is not an index page.
    is_index = stem.lower() in _INDEX_NAMES or (
        bool(folders) and stem.lower() == folders[-1].lower()
    )
    if is_index:
        return "/".join(folder_route)
    return "/".join([*folder_route, strip_number_prefix(stem)])


def page_url(base_url: str, document_id: str, slug: str | None = None) -> str:
    """``<base>/docs/<route>``; empty when there is no base URL."""
    base = base_url.strip()
    if not base:
        return ""
    route = doc_route(document_id, slug)
    return f"{base.rstrip('/')}/docs/{route}"


def placement(document_id: str) -> Placement:
    """Module: the first folder named ``module-*``; chapter: the first named ``chapter-*``.

    Pages outside those folders (the introduction, the appendix) get empty values, which
    is what the API documents as "outside a module": a filter on a module never matches
    them by accident.
    """
    folders = document_id.strip("/").split("/")[:-1]
    module = next((f for f in folders if f.startswith("module-")), "")
    chapter = next((f for f in folders if f.startswith("chapter-")), "")
    return Placement(module, chapter)


def _normalise(route: str) -> str:
    cleaned = posixpath.normpath("/" + route.strip())
    return cleaned.strip("/") if cleaned != "/" else ""
