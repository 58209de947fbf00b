"""The YAML front matter of a Docusaurus page, reduced to the keys ingestion uses."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from service.access import LabelError, labels

_OPEN = re.compile(r"\A\ufeff?---[ \t]*\r?\n")
_CLOSE = re.compile(r"^---[ \t]*\r?$\n?", re.M)


class MarkdownError(ValueError):
    """A page cannot be read as Markdown; the message names the page."""


class FrontMatterError(MarkdownError):
    """The front matter is not valid YAML or not a mapping.

    ``body`` is the page text to use without front matter, so that a caller can go on.
    """

    def __init__(self, message: str, body: str) -> None:
        super().__init__(message)
        self.body = body


@dataclass(frozen=True, slots=True)
class FrontMatter:
    """The front-matter keys that matter for ingestion; everything else is ignored."""

    title: str = ""
    description: str = ""
    slug: str | None = None
    sidebar_position: float | None = None
    tags: tuple[str, ...] = ()
    # Who may read the page (service.access labels), from the ``access`` key; None when
    # the key is absent, and then ``access_error`` says why when it is present but unusable.
    access: tuple[str, ...] | None = None
    access_error: str = ""


ACCESS_KEY = "access"


def split_front_matter(text: str, path: str = "") -> tuple[FrontMatter, str]:
    """(front matter, body). A page without front matter gets an empty one."""
    text = text.replace("\r\n", "\n")
    opening = _OPEN.match(text)
    if opening is None:
        return FrontMatter(), text.lstrip("\ufeff")
    closing = _CLOSE.search(text, opening.end())
    name = path or "<document>"
    if closing is None:
        # Without a closing line Docusaurus sees a thematic break, not metadata: keep the text.
        raise FrontMatterError(f"{name}: front matter opened with '---' is never closed", text)
    raw, body = text[opening.end() : closing.start()], text[closing.end() :]
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" (line {mark.line + 2})"  # +1 for 1-based, +1 for the opening '---'
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise FrontMatterError(
            f"{name}: invalid YAML front matter{where}: {problem}", body
        ) from exc
    if data is None:
        return FrontMatter(), body
    if not isinstance(data, dict):
        raise FrontMatterError(
            f"{name}: front matter must be a mapping, not {type(data).__name__}", body
        )
    return _from_mapping(data), body


def _from_mapping(data: dict[Any, Any]) -> FrontMatter:
    slug = data.get("slug")
    position = data.get("sidebar_position")
    return FrontMatter(
        title=_text(data.get("title")),
        description=_text(data.get("description")),
        slug=None if slug is None or str(slug).strip() == "" else str(slug).strip(),
        sidebar_position=(
            float(position)
            if isinstance(position, (int, float)) and not isinstance(position, bool)
            else None
        ),
        tags=_tags(data.get("tags")),
        **_access(data.get(ACCESS_KEY), ACCESS_KEY in data),
    )


_ACCESS_LINE = re.compile(rf"^{ACCESS_KEY}[ \t]*:")


def without_access_key(text: str) -> str:
    """``text`` with the front matter's ``access`` key taken out, for the document's hash:
    who may read a page is not what it says, so a change of readers alone keeps the hash
    (and the page is relabelled, not embedded again). The key's lines are cut out as
    written, so a page without the key hashes exactly as before; when the cut would change
    any other key (an unusual layout), the text is returned whole."""
    opening = _OPEN.match(text)
    if opening is None:
        return text
    closing = _CLOSE.search(text, opening.end())
    if closing is None:
        return text
    lines = text[opening.end() : closing.start()].splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if _ACCESS_LINE.match(line)), None)
    if start is None:
        return text
    end = start + 1
    while end < len(lines) and (lines[end][:1] in (" ", "\t") or not lines[end].strip()):
        end += 1
    kept = "".join(lines[:start] + lines[end:])
    try:
        whole, cut = yaml.safe_load(text[opening.end() : closing.start()]), yaml.safe_load(kept)
    except yaml.YAMLError:
        return text
    if not isinstance(whole, dict) or (cut or {}) != {
        k: v for k, v in whole.items() if k != ACCESS_KEY
    }:
        return text
    return text[: opening.end()] + kept + text[closing.start() :]


def _access(value: object, present: bool) -> dict[str, Any]:
    """``access: {groups: [...], principals: [...]}``; a single name may stand for a list."""
    if not present:
        return {}
    try:
        found = _labels(value)
    except LabelError as error:
        return {"access_error": f"front matter '{ACCESS_KEY}': {error}"}
    if not found:
        return {"access_error": f"front matter '{ACCESS_KEY}' names no group or principal"}
    return {"access": found}


def _labels(value: object) -> tuple[str, ...]:
    if not isinstance(value, dict):
        raise LabelError("must be a mapping with 'groups' and/or 'principals'")
    unknown = sorted(str(k) for k in value if k not in ("groups", "principals"))
    if unknown:
        raise LabelError(f"unknown key {unknown[0]!r} (expected 'groups', 'principals')")
    return labels(_names(value.get("groups")), _names(value.get("principals")))


def _names(value: object) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    return [value]


def _text(value: object) -> str:
    return "" if value is None else " ".join(str(value).split())


def _tags(value: object) -> tuple[str, ...]:
    # Docusaurus accepts a list of names or of {label, permalink} objects.
    items: list[object] = value if isinstance(value, list) else [] if value is None else [value]
    tags: list[str] = []
    for item in items:
        label = item.get("label") if isinstance(item, dict) else item
        if label is not None and str(label).strip():
            tags.append(str(label).strip())
    return tuple(tags)
