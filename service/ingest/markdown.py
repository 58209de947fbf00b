"""Markdown/MDX pages as title, metadata and a list of sections made of text blocks.

The parser is line based and forgiving: anything it does not recognise stays as paragraph
text, because losing words hurts retrieval more than keeping a stray symbol. Only broken
front matter is reported, as a :class:`FrontMatterError` or (leniently) a warning.
"""

from __future__ import annotations

import re

from service.ingest import budget, inline, mdx
from service.ingest.document import Block, ParsedDocument, Section
from service.ingest.frontmatter import FrontMatter, FrontMatterError, split_front_matter

__all__ = [
    "PARSER_VERSION",
    "Block",
    "FrontMatterError",
    "ParsedDocument",
    "Section",
    "parse_markdown",
]

# Bump when parsing changes what text a page yields, so that every document is re-indexed.
PARSER_VERSION = "1"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_ADMONITION = re.compile(r"^ {0,3}:{3,}[ \t]*([A-Za-z][\w-]*)(?:\[(.*)\]|[ \t]+(.*))?$")
_ADMONITION_END = re.compile(r"^ {0,3}:{3,}[ \t]*$")
_THEMATIC = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_TABLE_RULE = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_IMPORT = re.compile(r"import\s+(?:[\w*{}\s,]+?\s+from\s+)?(['\"]).*?\1;?", re.S)
_EXPORT = re.compile(r"export\s+(?:const|let|var|function|default|class|async|\{)")
_HEADING_ID = re.compile(r"\s*\{#[\w-]+\}\s*$")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_)(\S(?:.*?\S)?)\1")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


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
    parser = _Parser()
    parser.run(body)
    sections = [s for s in parser.sections if s.blocks]
    if front.description:
        # Docusaurus shows it only in metadata, but it is a page summary written by the
        # author: a good first passage for retrieval.
        preamble = sections[0] if sections and not sections[0].path else None
        if preamble is None:
            preamble = Section((), 0)
            sections.insert(0, preamble)
        preamble.blocks.insert(0, Block("paragraph", front.description))
    title = front.title or parser.h1 or _title_from_path(path)
    return ParsedDocument(
        title=title,
        sections=tuple(sections),
        description=front.description,
        slug=front.slug,
        sidebar_position=front.sidebar_position,
        tags=front.tags,
        warnings=tuple(warnings),
    )


def _title_from_path(path: str) -> str:
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    stem = re.sub(r"^\d+-", "", stem)
    return stem.replace("-", " ").replace("_", " ").strip() or "Untitled"


def _line(text: str, pos: int) -> str:
    """The rest of the line that starts or continues at ``pos``."""
    end = text.find("\n", pos)
    return text[pos:] if end < 0 else text[pos:end]


def clean_heading(text: str) -> str:
    """Heading text without ids, links, emphasis or markup."""
    text = inline.clean_inline(_HEADING_ID.sub("", text))
    text = _LINK.sub(r"\1", text)
    text = _EMPHASIS.sub(r"\2", text)
    return " ".join(text.replace("`", "").split())


class _Parser:
    """Walks the body once, filling ``sections``; ``h1`` is the first level-1 heading."""

    def __init__(self) -> None:
        self.sections: list[Section] = [Section((), 0)]
        self.h1 = ""
        self._stack: list[tuple[int, str]] = []
        self._paragraph: list[str] = []
        self._code_language: str | None = None
        self._braces: dict[int, int] = {}  # see mdx.skip_expression (one text per parser)

    def run(self, text: str) -> None:
        pos = 0
        while pos < len(text):
            budget.check()
            pos = self._step(text, pos)
        self._flush()

    def _emit(self, block: Block) -> None:
        self.sections[-1].blocks.append(block)

    def _flush(self) -> None:
        if self._paragraph:
            cleaned = inline.clean_inline("\n".join(self._paragraph)).strip("\n")
            self._paragraph = []
            if cleaned.strip():
                self._emit(Block("paragraph", cleaned))

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
            nested = _Parser()
            nested.run(text)
            for section in nested.sections:
                for block in section.blocks:
                    self._emit(block)
        if lines:
            self._emit(Block("paragraph", "\n".join(lines)))

    def _step(self, text: str, pos: int) -> int:
        """Consumes the construct starting at ``pos``; returns the offset after it."""
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        line, after = text[pos:end], min(end + 1, len(text))
        handled = self._markdown_block(text, line, after)
        if handled is None:
            handled = self._mdx_block(text, pos, line, end)
        if handled is not None:
            return handled
        if line.lstrip().startswith("|") or ("|" in line and _TABLE_RULE.match(_line(text, after))):
            return self._table(text, pos)
        self._paragraph.append(line.rstrip())
        return after

    def _markdown_block(self, text: str, line: str, after: int) -> int | None:
        """Blank lines, rules, fences, headings and admonition markers."""
        if not line.strip() or _THEMATIC.match(line) or _ADMONITION_END.match(line):
            self._flush()
            return after
        if fence := _FENCE.match(line):
            self._flush()
            return self._code(text, after, fence)
        if heading := _HEADING.match(line):
            self._flush()
            self._heading(len(heading.group(1)), clean_heading(heading.group(2) or ""))
            return after
        if admonition := _ADMONITION.match(line):
            self._flush()
            kind, title = admonition.group(1), admonition.group(2) or admonition.group(3) or ""
            label = clean_heading(title)
            self._emit(Block("paragraph", f"{kind.capitalize()}: {label}".rstrip()))
            return after
        return None

    def _mdx_block(self, text: str, pos: int, line: str, end: int) -> int | None:
        """ESM statements, JS expressions and tags that stand on their own."""
        stripped = line.strip()
        if not self._paragraph and line.startswith(("import ", "export ")):
            statement = _IMPORT.match(text, pos) or _EXPORT.match(text, pos)
            if statement is not None:
                return self._skip_statement(text, pos, statement.end())
        if stripped.startswith("{"):
            return self._expression(text, pos + line.index("{"), end)
        if stripped.startswith("<"):
            return self._block_tag(text, pos + line.index("<"), end)
        return None

    def _heading(self, level: int, title: str) -> None:
        if level == 1 and not self.h1 and not self._stack:
            self.h1 = title
            return
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, title))
        self.sections.append(Section(tuple(t for _, t in self._stack), level))

    def _code(self, text: str, pos: int, fence: re.Match[str]) -> int:
        marker, indent = fence.group("fence"), len(fence.group("indent"))
        language = (fence.group("info") or "").split()[0] if fence.group("info") else ""
        lines: list[str] = []
        while pos < len(text):
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            line, pos = text[pos:end], end + 1
            closing = line.strip()
            if closing.startswith(marker[0] * len(marker)) and not closing.strip(marker[0]):
                break
            strip = min(indent, len(line) - len(line.lstrip(" ")))
            lines.append(line[strip:].rstrip())
        self._emit(Block("code", "\n".join(lines).strip("\n"), language.strip("{}")))
        return min(pos, len(text))

    def _skip_statement(self, text: str, pos: int, end: int) -> int:
        if text.startswith("export", pos):
            # An export runs until its brackets close at the end of a line.
            depth, i = 0, pos
            while i < len(text):
                char = text[i]
                if char in "'\"`":
                    skipped = mdx.skip_string(text, i)
                    i = i + 1 if skipped < 0 else skipped
                    continue
                depth += (char in "({[") - (char in ")}]")
                if char == "\n" and depth <= 0:
                    return i + 1
                i += 1
            return len(text)
        newline = text.find("\n", end)
        return len(text) if newline < 0 else newline + 1

    def _expression(self, text: str, start: int, line_end: int) -> int:
        end = mdx.skip_expression(text, start, len(text), self._braces)
        if end < 0:
            self._paragraph.append(text[start:line_end])
            return line_end + 1
        self._flush()
        inner = text[start + 1 : end - 1].strip()
        if not (inner.startswith("/*") and inner.endswith("*/")):
            fragments = mdx.js_fragments(inner)
            if self._code_language is not None and len(fragments) == 1:
                # The child of a code component such as <CodeBlock language="python">.
                code = fragments[0].text.strip("\n")
                self._emit(Block("code", code, self._code_language))
            else:
                self._emit_text(mdx.group_fragments(fragments))
        return end

    def _block_tag(self, text: str, start: int, line_end: int) -> int | None:
        if text.startswith("<!--", start):
            self._flush()
            end = text.find("-->", start)
            return len(text) if end < 0 else end + 3
        tag = mdx.scan_tag(text, start, self._braces)
        if tag is None:
            return None
        if tag.end <= line_end and _line(text, tag.end).strip():
            return None  # an inline tag at the start of a text line: the paragraph cleans it
        self._flush()
        if tag.closing:
            self._code_language = None
        else:
            language = tag.attr("language") or tag.attr("lang")
            if language is not None and not tag.self_closing:
                self._code_language = language
            self._emit_text(mdx.tag_text(tag))
        return tag.end

    def _table(self, text: str, pos: int) -> int:
        self._flush()
        rows: list[str] = []
        while pos < len(text):
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            line = text[pos:end]
            if not line.strip() or "|" not in line:
                break
            pos = end + 1
            if _TABLE_RULE.match(line):
                continue
            cells = [c.strip() for c in _CELL_SPLIT.split(line.strip())]
            if cells and not cells[0]:
                cells = cells[1:]
            if cells and not cells[-1]:
                cells = cells[:-1]
            rows.append(" | ".join(inline.clean_inline(c.replace("\\|", "|")) for c in cells))
        if rows:
            self._emit(Block("table", "\n".join(rows)))
        return min(pos, len(text))
