"""Commands in code blocks, quotable when the question asks for one.

The extractive strategy quotes prose, list items and table rows; code is left out, since a
block of code read as a sentence says nothing. A question that asks for a command ("Which
command builds the workspace?", "How do I launch ...?") is answered by one, though, so then
the command lines of the retrieved chunks become candidates too: the lines of a fenced block
marked as a shell session (bash, sh, console, ...), or of any block whose lines are prompts
("$ ros2 run ..."). Comments, output and blank lines are not commands.
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
