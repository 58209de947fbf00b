"""Markdown/MDX pages as title, metadata and a list of sections made of text blocks.

markdown-it-py reads the Markdown structure (headings, fences, lists, quotes, tables),
:mod:`service.ingest.mdx_blocks` the MDX around it, and this module turns the tokens into
sections of text blocks. It is forgiving: anything not recognised stays as paragraph text,
because losing words hurts retrieval more than keeping a stray symbol. Only broken front
matter is reported, as a :class:`FrontMatterError` or (leniently) a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from markdown_it import MarkdownIt
from markdown_it.token import Token

from service.ingest import inline, mdx
from service.ingest.document import Block, ParsedDocument, Section
from service.ingest.frontmatter import FrontMatter, FrontMatterError, split_front_matter
from service.ingest.mdx_blocks import mdx_parser

__all__ = [
    "PARSER_VERSION",
    "Block",
    "FrontMatterError",
    "ParsedDocument",
    "Section",
    "parse_markdown",
]

# Bump when parsing changes what text a page yields, so that every document is re-indexed.
PARSER_VERSION = "2"

_HEADING_ID = re.compile(r"\s*\{#[\w-]+\}\s*$")
_LINE_ENDS = re.compile(r"\r\n?")
# One parser for every thread: a parse keeps its state in its own objects.
_BODY = mdx_parser()
_INLINE = MarkdownIt("commonmark", {"html": False})


def parse_markdown(text: str, path: str = "", *, strict: bool = False) -> ParsedDocument:
    """Parses one page. ``path`` names it in messages and gives the fallback title.

    Broken front matter raises :class:`FrontMatterError` when ``strict``; otherwise the
    page is parsed without it and the problem is listed in ``warnings``.
    """
    warnings: list[str] = []
    try:
        front, body = split_front_matter(text, path)
    except FrontMatterError as exc:
        if strict:
            raise
        warnings.append(str(exc))
        front, body = FrontMatter(), exc.body
    found, h1 = _parse_body(body)
    sections = [s for s in found if s.blocks]
    if front.description:
        # Docusaurus shows it only in metadata, but it is a page summary written by the
        # author: a good first passage for retrieval.
        preamble = sections[0] if sections and not sections[0].path else None
        if preamble is None:
            preamble = Section((), 0)
            sections.insert(0, preamble)
        preamble.blocks.insert(0, Block("paragraph", front.description))
    title = front.title or h1 or _title_from_path(path)
    return ParsedDocument(
        title=title,
        sections=tuple(sections),
        description=front.description,
        slug=front.slug,
        sidebar_position=front.sidebar_position,
        tags=front.tags,
        warnings=tuple(warnings),
    )


def _parse_body(body: str) -> tuple[list[Section], str]:
    """The sections of a page body (empty ones included) and its first level-1 heading."""
    # The library's own normalisation, done first so that its line numbers index ``lines``.
    body = _LINE_ENDS.sub("\n", body).replace("\0", "\ufffd")
    builder = _Builder(body.split("\n"))
    builder.run(_BODY.parse(body, {"braces": {}}))
    return builder.sections, builder.h1


def _title_from_path(path: str) -> str:
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    stem = re.sub(r"^\d+-", "", stem)
    return stem.replace("-", " ").replace("_", " ").strip() or "Untitled"


def clean_heading(text: str) -> str:
    """Heading text as read: without ids, inline MDX, links, emphasis or other markup."""
    cleaned = inline.clean_inline(_HEADING_ID.sub("", text))
    (line,) = _INLINE.parseInline(cleaned) or [Token("inline", "", 0)]
    return " ".join(_plain(line.children or []).split())


def _plain(tokens: list[Token]) -> str:
    """The words of inline tokens: text, code and image descriptions, breaks as spaces."""
    parts: list[str] = []
    for token in tokens:
        if token.type in ("text", "code_inline"):
            parts.append(token.content)
        elif token.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif token.children:
            parts.append(_plain(token.children))
    return "".join(parts)


class _Builder:
    """Turns the block tokens of one body into ``sections``; ``h1`` is the first level-1
    heading. Paragraph text is the source's own lines (list markers, links and all), cleaned
    of inline MDX by service.ingest.inline: chunks are shown as Markdown, and the library's
    inline parser knows neither JSX nor expressions, so it is used for heading text only."""

    def __init__(self, lines: list[str]) -> None:
        self.sections: list[Section] = [Section((), 0)]
        self.h1 = ""
        self._lines = lines
        self._stack: list[tuple[int, str]] = []
        self._paragraph: list[str] = []
        self._paragraph_end = -1  # the line after the paragraph being gathered
        self._rows: list[list[str]] | None = None  # the table being read
        self._code_language: str | None = None

    def run(self, tokens: list[Token]) -> None:
        for index, token in enumerate(tokens):
            kind = token.type
            if kind == "paragraph_open" and token.map:
                self._paragraph_lines(*token.map)
            elif kind == "inline" and self._rows is not None:
                self._rows[-1].append(inline.clean_inline(token.content.strip()))
            elif kind in _BLOCKS:
                self._flush()
                _BLOCKS[kind](self, token, tokens[index + 1 : index + 2])
        self._flush()

    def _emit(self, block: Block) -> None:
        self.sections[-1].blocks.append(block)

    def _paragraph_lines(self, start: int, end: int) -> None:
        # Paragraphs on adjacent lines are one block (the items of a tight list), as written.
        if start != self._paragraph_end:
            self._flush()
        self._paragraph.extend(line.rstrip() for line in self._lines[start:end])
        self._paragraph_end = end

    def _flush(self) -> None:
        if self._paragraph:
            cleaned = inline.clean_inline("\n".join(self._paragraph)).strip("\n")
            self._paragraph = []
            if cleaned.strip():
                self._emit(Block("paragraph", cleaned))
        self._paragraph_end = -1

    def _tail(self, token: Token) -> None:
        """The text after a construct that ended inside its last line."""
        if token.meta.get("tail") and token.map:
            self._paragraph.append(token.meta["tail"])
            self._paragraph_end = token.map[1]

    def _heading(self, token: Token, following: list[Token]) -> None:
        level = int(token.tag[1:])
        title = clean_heading(following[0].content if following else "")
        if level == 1 and not self.h1 and not self._stack:
            self.h1 = title
            return
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, title))
        self.sections.append(Section(tuple(t for _, t in self._stack), level))

    def _code(self, token: Token, _: list[Token]) -> None:
        language = token.info.split()[0].strip("{}") if token.info.strip() else ""
        text = "\n".join(line.rstrip() for line in token.content.split("\n")).strip("\n")
        self._emit(Block("code", text, language))

    def _table_open(self, token: Token, _: list[Token]) -> None:
        self._rows = []

    def _row_open(self, token: Token, _: list[Token]) -> None:
        if self._rows is not None:
            self._rows.append([])

    def _table_close(self, token: Token, _: list[Token]) -> None:
        rows = [" | ".join(cells) for cells in self._rows or []]
        self._rows = None
        if rows:
            self._emit(Block("table", "\n".join(rows)))

    def _admonition(self, token: Token, _: list[Token]) -> None:
        if token.info:
            label = clean_heading(token.content)
            self._emit(Block("paragraph", f"{token.info.capitalize()}: {label}".rstrip()))

    def _expression(self, token: Token, _: list[Token]) -> None:
        inner: str = token.meta["inner"]
        if not (inner.startswith("/*") and inner.endswith("*/")):
            fragments = mdx.js_fragments(inner)
            if self._code_language is not None and len(fragments) == 1:
                # The child of a code component such as <CodeBlock language="python">.
                code = fragments[0].text.strip("\n")
                self._emit(Block("code", code, self._code_language))
            else:
                self._emit_text(mdx.group_fragments(fragments))
        self._tail(token)

    def _tag(self, token: Token, _: list[Token]) -> None:
        tag: mdx.Tag | None = token.meta.get("tag")
        if tag is not None and tag.closing:
            self._code_language = None
        elif tag is not None:
            language = tag.attr("language") or tag.attr("lang")
            if language is not None and not tag.self_closing:
                self._code_language = language
            self._emit_text(mdx.tag_text(tag))
        self._tail(token)

    def _esm(self, token: Token, _: list[Token]) -> None:
        self._tail(token)

    def _emit_text(self, texts: list[str]) -> None:
        """Text recovered from JSX: one-line strings are plain text (JS knows no Markdown
        escapes), gathered into one paragraph; multi-line strings are Markdown of their own."""
        lines: list[str] = []
        for text in texts:
            if "\n" not in text:
                lines.append(text.strip())
                continue
            if lines:
                self._emit(Block("paragraph", "\n".join(lines)))
                lines = []
            for section in _parse_body(text)[0]:
                for block in section.blocks:
                    self._emit(block)
        if lines:
            self._emit(Block("paragraph", "\n".join(lines)))


_BuildStep = Callable[[_Builder, Token, list[Token]], None]
# The tokens that start a block of their own; the rest are containers or read with these.
_BLOCKS: dict[str, _BuildStep] = {
    "heading_open": _Builder._heading,
    "fence": _Builder._code,
    "table_open": _Builder._table_open,
    "tr_open": _Builder._row_open,
    "table_close": _Builder._table_close,
    "hr": lambda builder, token, following: None,
    "admonition": _Builder._admonition,
    "mdx_expression": _Builder._expression,
    "mdx_tag": _Builder._tag,
    "mdx_esm": _Builder._esm,
}
