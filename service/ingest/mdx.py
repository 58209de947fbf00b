"""Just enough of MDX's JavaScript side to recover the readable text of a page.

Docusaurus pages hide real content in JSX: tab labels, admonition-like components, and
whole tables or install guides written as JavaScript props. Rendering that needs a JS
engine; retrieval only needs the words, so this scans tags and expressions, keeps the
string literals that carry prose and drops identifiers, styling and markup.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from service.ingest import budget

_TAG_OPEN = re.compile(r"<(/)?([A-Za-z][\w.:-]*)?")
_ATTR_NAME = re.compile(r"[A-Za-z_:$][\w.:$-]*")
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
# Values such as 'hw-gpu-minimum' or 'ts_cuda_failed' are keys for code, not words for readers.
# skip_expression checks the document's budget once every this many + 1 characters.
_CHECK_EVERY = 0xFFF
# The longest JSX expression read as one; inline ones are far shorter (see inline.py).
MAX_EXPRESSION_CHARS = 65536
_SLUG = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)+")

# Props and object keys that steer rendering rather than say something to the reader.
SKIPPED_KEYS = frozenset(
    {
        "id", "key", "value", "classname", "class", "style", "src", "href", "to", "icon",
        "emoji", "emojiprefix", "language", "lang", "groupid", "width", "height", "variant",
        "querystring", "showlinenumbers", "metastring", "color", "size", "target", "rel",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Attr:
    """One JSX attribute: a quoted ``value``, a raw ``{expression}``, or neither (a flag)."""

    name: str
    value: str | None = None
    expression: str | None = None


@dataclass(frozen=True, slots=True)
class Tag:
    """A JSX/HTML tag found at some offset; ``end`` is the offset just past its ``>``."""

    name: str
    closing: bool
    self_closing: bool
    attrs: tuple[Attr, ...]
    end: int

    def attr(self, name: str) -> str | None:
        return next((a.value for a in self.attrs if a.name == name), None)


@dataclass(frozen=True, slots=True)
class Fragment:
    """A string literal from JavaScript; ``group`` numbers the object literal it sits in."""

    text: str
    group: int


def scan_tag(text: str, pos: int, known: dict[int, int] | None = None) -> Tag | None:
    """Parses the tag starting at ``text[pos] == '<'``; None when it is not a tag."""
    match = _TAG_OPEN.match(text, pos)
    if match is None:
        return None
    closing, name = match.group(1) is not None, match.group(2) or ""
    if not name and not text.startswith(">", match.end()):
        return None  # "<" followed by neither a name nor a fragment's ">": plain text
    i, attrs = match.end(), list[Attr]()
    while i < len(text):
        i = _skip_space(text, i)
        if text.startswith("/>", i):
            return Tag(name, closing, True, tuple(attrs), i + 2)
        if text.startswith(">", i):
            return Tag(name, closing, False, tuple(attrs), i + 1)
        attr, i = _scan_attr(text, i, known)
        if i < 0:
            return None
        if attr is not None:
            attrs.append(attr)
    return None


def _scan_attr(text: str, pos: int, known: dict[int, int] | None = None) -> tuple[Attr | None, int]:
    """One attribute (or a spread ``{...props}``, which yields None) and the offset after it;
    offset -1 when the text is not a well-formed attribute."""
    if text.startswith("{", pos):
        return None, skip_expression(text, pos, len(text), known)
    name_match = _ATTR_NAME.match(text, pos)
    if name_match is None:
        return None, -1
    name, i = name_match.group(), _skip_space(text, name_match.end())
    if not text.startswith("=", i):
        return Attr(name), i
    i = _skip_space(text, i + 1)
    quote = text[i : i + 1]
    if quote in ("'", '"'):
        end = text.find(quote, i + 1)
        return (Attr(name, value=text[i + 1 : end]), end + 1) if end >= 0 else (None, -1)
    if quote == "{":
        end = skip_expression(text, i, len(text), known)
        return (Attr(name, expression=text[i + 1 : end - 1]), end) if end >= 0 else (None, -1)
    return None, -1


def skip_expression(
    text: str,
    pos: int,
    limit: int = MAX_EXPRESSION_CHARS,
    known: dict[int, int] | None = None,
) -> int:
    """Offset just past the ``}`` matching ``text[pos] == '{'``, or -1 if it does not close
    within ``limit`` characters.

    ``known`` (one per text) remembers the answer for every brace a scan passed, so that
    asking again for each of them costs nothing: a page of unclosed braces scanned each
    one to the end, the square of its length (20 kB of "{" took 4 minutes). A scan from a
    brace inside another's expression reads the same characters in the same state, so the
    answers are exact. ``limit`` bounds the scans that cannot share answers.
    """
    if known is not None and pos in known:
        return known[pos]
    opened: list[int] = []
    i, stop = pos, min(len(text), pos + limit)
    while i < stop:
        if not i & _CHECK_EVERY:
            budget.check()
        char = text[i]
        after = _skip_literal(text, i)
        if after is not None:
            if after < 0:
                break
            i = after
            continue
        if char == "{":
            opened.append(i)
        elif char == "}" and opened:
            first = opened.pop()
            if known is not None:
                known[first] = i + 1
            if not opened:
                return i + 1
        i += 1
    else:
        if stop < len(text):
            return -1  # cut off by the limit: the braces still open may close later
    if known is not None:
        known.update(dict.fromkeys(opened, -1))
    return -1


def _skip_literal(text: str, i: int) -> int | None:
    """Offset after the string or comment at ``i`` (-1: it never ends), None if none is."""
    if text[i] in "'\"`":
        return skip_string(text, i)
    if text.startswith("/*", i):
        close = text.find("*/", i + 2)
        return -1 if close < 0 else close + 2
    if text.startswith("//", i) and text[i - 1 : i] != ":":  # not the // of a URL
        close = text.find("\n", i)
        return len(text) if close < 0 else close
    return None


def skip_string(text: str, pos: int) -> int:
    """Offset just past the JS string literal starting at ``text[pos]``, or -1."""
    quote, i = text[pos], pos + 1
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == quote:
            return i + 1
        if quote == "`" and text.startswith("${", i):
            i = skip_expression(text, i + 1)
            if i < 0:
                return -1
            continue
        if char == "\n" and quote != "`":
            return -1
        i += 1
    return -1


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def js_fragments(expression: str) -> list[Fragment]:
    """The prose-like string literals of a JS expression, in source order."""
    fragments: list[Fragment] = []
    stack: list[int] = [0]
    next_group, key, i = 1, "", 0
    while i < len(expression):
        char = expression[i]
        if char in "'\"`":
            end = skip_string(expression, i)
            if end < 0:
                break
            literal = _unescape_js(expression[i + 1 : end - 1], template=char == "`")
            if key.lower() not in SKIPPED_KEYS and is_prose(literal):
                fragments.append(Fragment(literal, stack[-1]))
            key, i = "", end
            continue
        if expression.startswith("/*", i):
            end = expression.find("*/", i + 2)
            i = len(expression) if end < 0 else end + 2
            continue
        ident = _IDENT.match(expression, i)
        if ident is not None:
            after = _skip_space(expression, ident.end())
            key = ident.group() if expression.startswith(":", after) else ""
            i = ident.end()
            continue
        if char == "{":
            stack.append(next_group)
            next_group += 1
        elif char == "}" and len(stack) > 1:
            stack.pop()
        if char in ",{}[]":
            key = ""
        i += 1
    return fragments


def _unescape_js(body: str, *, template: bool) -> str:
    if template:
        body = re.sub(r"\$\{[^}]*\}", "", body)
    simple = {"n": "\n", "t": "\t", "r": ""}
    return re.sub(r"\\(.)", lambda m: simple.get(m.group(1), m.group(1)), body, flags=re.S)


def is_prose(value: str) -> bool:
    """Whether a literal is worth indexing: it has letters or digits and is not a slug."""
    stripped = value.strip()
    return any(ch.isalnum() for ch in stripped) and not _SLUG.fullmatch(stripped)


def tag_text(tag: Tag) -> list[str]:
    """The content-carrying text of a tag's props, one entry per prop or JS object."""
    texts: list[str] = []
    for attr in tag.attrs:
        if attr.name.lower() in SKIPPED_KEYS:
            continue
        if attr.value is not None and is_prose(attr.value):
            texts.append(html.unescape(attr.value).strip())  # JSX decodes entities in props
        elif attr.expression is not None:
            texts.extend(group_fragments(js_fragments(attr.expression)))
    return texts


def group_fragments(fragments: list[Fragment]) -> list[str]:
    """Joins neighbouring one-line literals of one object into a line; long text stays apart."""
    lines: list[str] = []
    current: list[str] = []
    group = -1
    for fragment in fragments:
        multiline = "\n" in fragment.text.strip()
        if current and (multiline or fragment.group != group):
            lines.append("; ".join(current))
            current = []
        if multiline:
            lines.append(fragment.text.strip("\n"))
        else:
            current.append(fragment.text.strip())
        group = fragment.group
    if current:
        lines.append("; ".join(current))
    return lines
