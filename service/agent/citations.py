"""Keeps citations honest while the answer streams.

Models sometimes cite sources that do not exist ("[9]" with three sources). Such citations
must never reach the caller, yet the answer has to stream: so the filter holds back text
only while it may still be a citation (from "[" to "]", or until a character shows it is
not one) plus the spaces just before it, so that a dropped citation leaves no gap behind.
What it emits, concatenated, is exactly the final answer whatever the split of the input.

Accepted forms: "[1]", "[1, 2]", "[1,2]" and "[1][2]". Anything else in brackets ("[a]",
"[1-3]", "[]") is ordinary text.
"""

from __future__ import annotations

from collections.abc import Container

_MAX_CITATION_CHARS = 40
_INSIDE = frozenset("0123456789, ")
_SPACES = frozenset(" \t")
# After a dropped citation the spaces before it go too when these follow.
_CLOSES_GAP = frozenset(".,;:!?)\n")


class CitationFilter:
    """Feed it the model's text deltas; it returns the text that may be shown now."""

    def __init__(self, valid: Container[int]) -> None:
        # A live container: an agentic run finds sources between model turns.
        self._valid = valid
        self._spaces = ""
        self._open: str | None = None
        self._after_drop = False
        self._cited: list[int] = []

    @property
    def cited(self) -> list[int]:
        """Citation numbers that made it into the answer, in order of first appearance."""
        return list(self._cited)

    def feed(self, text: str) -> str:
        if self._open is None and not self._after_drop and "[" not in text:
            # Most deltas hold no bracket and follow plain text: all of it goes out but the
            # trailing spaces, which wait in case a citation follows (as _step would do it
            # character by character, at a tenth of the cost).
            body = text.rstrip(" \t")
            if not body:
                self._spaces += text
                return ""
            out, self._spaces = self._spaces + body, text[len(body) :]
            return out
        out_parts: list[str] = []
        for char in text:
            self._step(char, out_parts)
        return "".join(out_parts)

    def finish(self) -> str:
        """The held text once the answer has ended; an unclosed citation is dropped."""
        if self._open is not None or self._after_drop:
            self._spaces = ""  # nothing follows the gap a dropped citation left
        held, self._spaces, self._open = self._spaces, "", None
        return held

    def _step(self, char: str, out: list[str]) -> None:
        if self._open is not None:
            if char == "]":
                self._close(self._open + char, out)
                return
            if char in _INSIDE and len(self._open) < _MAX_CITATION_CHARS:
                self._open += char
                return
            # Not a citation after all: release it as text, then read this character afresh.
            self._emit(self._open, out)
            self._open = None
        if char == "[":
            self._open = char
        elif char in _SPACES:
            if not (self._after_drop and self._spaces):
                self._spaces += char
        elif self._after_drop and char in _CLOSES_GAP:
            self._spaces = ""
            self._emit(char, out)
        else:
            self._emit(char, out)

    def _emit(self, text: str, out: list[str]) -> None:
        out.append(self._spaces + text)
        self._spaces = ""
        self._after_drop = False

    def _close(self, token: str, out: list[str]) -> None:
        self._open = None
        parts = [part.strip() for part in token[1:-1].split(",")]
        if not all(part.isdigit() for part in parts):
            self._emit(token, out)
            return
        numbers = [int(part) for part in parts]
        kept = list(dict.fromkeys(n for n in numbers if n in self._valid))
        for number in kept:
            if number not in self._cited:
                self._cited.append(number)
        if not kept:
            self._after_drop = True  # the held spaces wait for what follows
        elif kept == numbers:
            self._emit(token, out)
        else:
            self._emit("[" + ", ".join(str(n) for n in kept) + "]", out)
