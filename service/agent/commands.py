"""Lines of code blocks the extractive strategy may quote.

The extractive strategy quotes prose, list items and table rows; a block of code read as a
sentence says nothing. Single lines of it often state the fact asked for, though: a value
(``temperature: 0.3``, ``SAMPLE_RATE = 16000``), a field, a command. So:

- A question that asks for a command ("Which command builds the workspace?", "How do I
  launch ...?") makes the command lines of the retrieved chunks candidates
  (:func:`command_pieces`): the lines of a fenced block marked as a shell session (bash, sh,
  console, ...), or of any block whose lines are prompts ("$ ros2 run ..."). Comments,
  output and blank lines are not commands.
- Any question makes candidates of the code lines (:func:`code_lines`) that share one of
  its content words, the extractive strategy decides (``temperature`` in "What temperature
  does the planner use?"): short lines with a word in them, not lines that only open a
  block (``def f():``, ``model:``, ``<link name="base">``), bare calls, box drawings,
  imports (``from x import y``: what is used, not what is done) or one-line docstrings
  (a title echoing the question's words, no fact). A chosen line brings the rest of its
  block when the block is short (:func:`code_blocks`): a message definition, a short
  configuration.
"""

from __future__ import annotations

import re

from service.text.sentences import Piece

# The question asks for something typed at a prompt.
_ASKS = re.compile(
    r"\b(commands?|run|runs|install|installs|launch|launches|execute|terminal|shell|cli|"
    r"type|build|builds)\b",
    re.IGNORECASE,
)
_FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+-]*)")
_SHELLS = frozenset({"bash", "sh", "shell", "console", "zsh", "terminal", "powershell", "ps1"})
_PROMPT = re.compile(r"^\s*(?:\$|>|PS>|#\s*\$)\s+")
# The longest line quoted as a command: longer is a script, not something to type.
MAX_COMMAND_CHARS = 200


def asks_for_command(question: str) -> bool:
    return bool(_ASKS.search(question))


def command_pieces(text: str) -> list[Piece]:
    """The command lines of ``text``'s code blocks, in order (each its own piece)."""
    pieces: list[Piece] = []
    language: str | None = None  # inside a block: its info string
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if fence:
            language = None if language is not None else fence[2].lower()
            continue
        if language is None:
            continue
        command = _command(line, shell=language in _SHELLS)
        if command:
            pieces.append(Piece(command, "command", detached=True))
    return pieces


def _command(line: str, *, shell: bool) -> str:
    prompt = _PROMPT.match(line)
    if prompt:
        line = line[prompt.end() :]
    elif not shell:
        return ""  # code of another language, or output
    line = line.strip()
    if not line or line.startswith("#") or len(line) > MAX_COMMAND_CHARS:
        return ""
    return line


# The longest code line quoted: a longer one is not a fact read at a glance.
MAX_CODE_LINE_CHARS = 100
_WORD_CHAR = re.compile(r"[A-Za-z]")
_OPENS_BLOCK = (":", "{", "(", "[")
_BARE_CALL = re.compile(r"^[\w.]+\(\)$")
# An element's opening or closing tag alone (``<link name="base_link">``): it opens a block.
_TAG_ONLY = re.compile(r"^</?[\w:.-]+(?:\s[^<>]*[^/<>])?>$")
_BOX_DRAWING = re.compile(r"[\u2500-\u257f]")
# What a program uses, not what it does: an import, an include, a namespace.
_IMPORT = re.compile(r"^(?:from\s+\S+\s+)?import\s|^#include\b|^using\s+namespace\b")
# A one-line docstring: the title of what follows.
_DOCSTRING = re.compile(r"^(\"\"\"|\'\'\').*\1$")


def code_lines(text: str) -> list[Piece]:
    """The lines of ``text``'s code blocks that can stand as a quote, in order (each its own
    piece, a prompt dropped): a value, a field, a call with arguments, a comment."""
    return [piece for block in code_blocks(text) for piece in block]


def code_blocks(text: str) -> list[list[Piece]]:
    """The quotable lines of ``text``'s code blocks (:func:`code_lines`), block by block; a
    block without any is an empty list."""
    blocks: list[list[Piece]] = []
    inside = False
    for line in text.splitlines():
        if _FENCE.match(line):
            inside = not inside
            if inside:
                blocks.append([])
            continue
        if inside:
            quoted = _code_line(line)
            if quoted:
                blocks[-1].append(Piece(quoted, "code", detached=True))
    return blocks


def _code_line(line: str) -> str:
    prompt = _PROMPT.match(line)
    line = (line[prompt.end() :] if prompt else line).strip().rstrip(",;")
    if (
        len(line) > MAX_CODE_LINE_CHARS
        or not _WORD_CHAR.search(line)
        or _BOX_DRAWING.search(line)
        or line.endswith(_OPENS_BLOCK)
        or _BARE_CALL.match(line)
        or _TAG_ONLY.match(line)
        or _IMPORT.match(line)
        or _DOCSTRING.match(line)
    ):
        return ""
    return line
