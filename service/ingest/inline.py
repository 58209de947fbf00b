"""Prose as a reader sees it: inline tags, comments, entities and escapes resolved.

Inline code spans are left exactly as written, since ``<box>`` or ``&lt;`` inside
backticks is what the author wants shown.
"""

from __future__ import annotations

import html
import re

from service.ingest import budget
from service.ingest.mdx import js_fragments, scan_tag, skip_expression, tag_text

_AUTOLINK = re.compile(r"<((?:https?|mailto):[^\s<>]+)>")
_SPACES = re.compile(r"(?<=\S)[ \t]{2,}")
_ESCAPABLE = frozenset("&<>{}")


def clean_inline(text: str) -> str:
    """Prose as a reader sees it: inline tags, comments and escapes resolved, code untouched."""
    parts: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "`":
            run = len(text) - len(text[i:].lstrip("`"))
            fence = text[i:run]
            end = _find_code_end(text, run, fence)
            if end >= 0:
                parts.append(text[i : end + len(fence)])
                i = end + len(fence)
                continue
            parts.append(fence)
            i = run
            continue
        nxt = text.find("`", i)
        nxt = len(text) if nxt < 0 else nxt
        parts.append(_clean_prose(text[i:nxt]))
        i = nxt
    return "".join(parts)


def _find_code_end(text: str, pos: int, fence: str) -> int:
    while True:
        end = text.find(fence, pos)
        if end < 0:
            return -1
        after = end + len(fence)
        if after >= len(text) or text[after] != "`":
            return end
        pos = after + len(text[after:]) - len(text[after:].lstrip("`"))


def _clean_prose(text: str) -> str:
    out: list[str] = []
    braces: dict[int, int] = {}  # see mdx.skip_expression
    i = 0
    while i < len(text):
        if not i & 0xFFF:  # every 4096 characters: a 2 MB paragraph stops when told to
            budget.check()
        char = text[i]
        if char == "\\" and text[i + 1 : i + 2] in _ESCAPABLE:
            # Docusaurus pages write "\&lt;" and "\{" to keep MDX from reading markup.
            out.append(text[i + 1])
            i += 2
            continue
        if text.startswith("<!--", i):
            end = text.find("-->", i + 4)
            i = len(text) if end < 0 else end + 3
            continue
        if char == "<":
            link = _AUTOLINK.match(text, i)
            tag = None if link else scan_tag(text, i, braces)
            if link is not None:
                out.append(link.group(1))
                i = link.end()
                continue
            if tag is not None:
                texts = [] if tag.closing else tag_text(tag)
                out.append(" ".join(texts) + (" " if texts else ""))
                i = tag.end
                continue
        if char == "{":
            end = skip_expression(text, i, len(text), braces)
            if end > 0:
                inner = text[i + 1 : end - 1].strip()
                found = js_fragments(inner)
                if (inner.startswith("/*") and inner.endswith("*/")) or found:
                    out.append(" ".join(f.text for f in found))
                    i = end
                    continue
        out.append(char)
        i += 1
    return _SPACES.sub(" ", html.unescape("".join(out)).replace("\xa0", " "))
