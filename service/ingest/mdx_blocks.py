"""markdown-it-py set up for the MDX that Docusaurus pages are written in.

The library parses the Markdown structure (CommonMark and GFM tables); the block rules here
add what MDX puts around it, as tokens that :mod:`service.ingest.markdown` turns into text:

- ``mdx_esm``: ``import``/``export`` statements at the top level (dropped);
- ``mdx_expression``: a ``{...}`` JavaScript expression opening a line (``meta["inner"]``);
- ``mdx_tag``: a JSX tag standing on its own line (``meta["tag"]``; None for an HTML
  comment);
- ``admonition``: a ``:::kind title`` or closing ``:::`` line (``info`` kind, ``content``
  title). Markers only, not containers: their body is ordinary Markdown either way.

A construct that ends inside a line leaves the rest of that line in ``meta["tail"]``. As
in MDX, there is no indented code (indentation is how JSX children are laid out) and no
HTML block (tags are JSX). Where nesting reaches the library's limit, the rest of the
container is kept as one raw paragraph, since the library would otherwise drop it.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt
from markdown_it.ruler import RuleOptionsType
from markdown_it.rules_block import StateBlock
from markdown_it.token import Token

from service.ingest import budget, mdx

_IMPORT = re.compile(r"import\s+(?:[\w*{}\s,]+?\s+from\s+)?(['\"]).*?\1;?", re.S)
_EXPORT = re.compile(r"export\s+(?:const|let|var|function|default|class|async|\{)")
_ADMONITION = re.compile(r":{3,}[ \t]*([A-Za-z][\w-]*)(?:\[(.*)\]|[ \t]+(.*))?$")
_ADMONITION_END = re.compile(r":{3,}[ \t]*$")
# Constructs that end a paragraph, list or quote without a blank line, as in MDX.
_INTERRUPTS: RuleOptionsType = {"alt": ["paragraph", "reference", "blockquote", "list"]}


def mdx_parser() -> MarkdownIt:
    """A parser for page bodies; its ``parse`` needs ``env={"braces": {}}`` per text."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table").disable("code")
    # Only the block structure is read: inline text is cleaned by service.ingest.inline.
    md.core.ruler.disable(["inline", "text_join"])
    ruler = md.block.ruler
    ruler.before("table", "budget", _budget, _INTERRUPTS)
    ruler.before("table", "too_deep", _too_deep)
    ruler.before("table", "mdx_esm", _esm)
    ruler.before("table", "admonition", _admonition, _INTERRUPTS)
    ruler.before("table", "mdx_expression", _expression, _INTERRUPTS)
    ruler.before("table", "mdx_tag", _tag, _INTERRUPTS)
    return md


def _budget(state: StateBlock, line: int, end: int, silent: bool) -> bool:
    """Matches nothing; tried at every block and paragraph line, so a runaway parse stops."""
    budget.check()
    return False


def _too_deep(state: StateBlock, line: int, end: int, silent: bool) -> bool:
    """The rest of a container nested close to ``maxNesting`` as one raw paragraph: at the
    limit the library skips the remaining lines, and a page of 400 nested quotes has words
    past it (before the next container opens two levels deeper, hence the margin)."""
    if silent or state.level < state.md.options.maxNesting - 3:
        return False
    state.push("paragraph_open", "p", 1).map = [line, end]
    state.push("paragraph_close", "p", -1)
    state.line = end
    return True


def _line_start(state: StateBlock, line: int) -> int:
    return state.bMarks[line] + state.tShift[line]


def _line_of(state: StateBlock, offset: int, line: int) -> int:
    """The line holding ``offset``, searching from ``line``."""
    while line + 1 < state.lineMax and state.bMarks[line + 1] <= offset:
        line += 1
    return line


def _last_line(state: StateBlock, line: int, offset: int, end: int) -> int:
    """The line where a construct ending at ``offset`` ends; -1 past the container's end
    (then it is text to the container, which the paragraph cleans as inline MDX)."""
    last = _line_of(state, max(offset - 1, 0), line)
    return last if last < end else -1


def _finish(state: StateBlock, line: int, last: int, offset: int, kind: str) -> Token:
    """A token for lines ``line..last``; ``meta["tail"]`` holds the rest of the last line."""
    token = state.push(kind, "", 0)
    token.map = [line, last + 1]
    token.meta = {"tail": state.src[offset : state.eMarks[last]].strip()}
    state.line = last + 1
    return token


def _esm(state: StateBlock, line: int, end: int, silent: bool) -> bool:
    start = _line_start(state, line)
    if state.level or state.tShift[line] or not state.src.startswith(("import ", "export "), start):
        return False
    statement = _IMPORT.match(state.src, start) or _EXPORT.match(state.src, start)
    if statement is None:
        return False
    close = _statement_end(state.src, start, statement.end())
    last = _last_line(state, line, close, end)
    if last < 0:
        return False
    if not silent:
        _finish(state, line, last, close, "mdx_esm")
    return True


def _statement_end(text: str, pos: int, end: int) -> int:
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
                return i
            i += 1
        return len(text)
    newline = text.find("\n", end)
    return len(text) if newline < 0 else newline


def _admonition(state: StateBlock, line: int, end: int, silent: bool) -> bool:
    if state.sCount[line] - state.blkIndent > 3:
        return False
    text = state.src[_line_start(state, line) : state.eMarks[line]]
    opening = _ADMONITION.match(text)
    if opening is None and not _ADMONITION_END.match(text):
        return False
    if not silent:
        token = state.push("admonition", "", 0)
        token.map = [line, line + 1]
        if opening is not None:
            token.info = opening.group(1)
            token.content = opening.group(2) or opening.group(3) or ""
        state.line = line + 1
    return True


def _expression(state: StateBlock, line: int, end: int, silent: bool) -> bool:
    start = _line_start(state, line)
    if not state.src.startswith("{", start):
        return False
    # An unclosed brace is text: the paragraph keeps it.
    close = mdx.skip_expression(state.src, start, len(state.src), state.env["braces"])
    last = _last_line(state, line, close, end) if close > 0 else -1
    if last < 0:
        return False
    if not silent:
        token = _finish(state, line, last, close, "mdx_expression")
        token.meta["inner"] = state.src[start + 1 : close - 1].strip()
    return True


def _tag(state: StateBlock, line: int, end: int, silent: bool) -> bool:
    start = _line_start(state, line)
    tag: mdx.Tag | None = None
    if state.src.startswith("<!--", start):
        close = state.src.find("-->", start)
        close = len(state.src) if close < 0 else close + 3
    elif state.src.startswith("<", start):
        tag = mdx.scan_tag(state.src, start, state.env["braces"])
        if tag is None:
            return False
        close = tag.end
        if close <= state.eMarks[line] and state.src[close : state.eMarks[line]].strip():
            return False  # an inline tag opening a line of text: the paragraph cleans it
    else:
        return False
    last = _last_line(state, line, close, end)
    if last < 0:
        return False
    if not silent:
        _finish(state, line, last, close, "mdx_tag").meta["tag"] = tag
    return True
