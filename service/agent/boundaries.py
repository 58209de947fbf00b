"""Markers around untrusted text in prompts that the text itself cannot forge.

Passages (anyone who can get a page into the corpus writes them), tool results and the
caller's instructions reach the model between markers. Each run draws a random code that
goes into its markers and into the system prompt naming them, so a document or a caller,
who never sees the code, cannot write a marker that ends its block early. Inside the
untrusted text, anything that looks like a marker (any case, any spacing: ``</PASSAGES >``,
``< / caller_instructions>``) and any line opening with a passage number (``[2] Official
Manual``, which would credit the text to another source) is defused as well, so that even
a model that ignores the code sees no structure there.
"""

from __future__ import annotations

import re
import secrets

# Names of the blocks; a marker is "<name-code>" and "</name-code>".
PASSAGES = "passages"
INSTRUCTIONS = "caller_instructions"

# "<", optional "/", then a block name, in any case and with any blanks between.
_MARKER = re.compile(r"<(\s*/?\s*)(passages|caller_instructions)", re.IGNORECASE)
# A line that starts (after blanks) with a passage number such as "[2]" or "[ 12 ]".
_LABEL = re.compile(r"^([ \t]*)\[(\s*\d+\s*)\]", re.MULTILINE)


def new_code() -> str:
    """A fresh random code for one run's markers (48 bits: not guessable in one try)."""
    return secrets.token_hex(6)


def markers(name: str, code: str) -> tuple[str, str]:
    """The opening and closing marker of block ``name`` (plain ones without a code)."""
    suffix = f"-{code}" if code else ""
    return f"<{name}{suffix}>", f"</{name}{suffix}>"


def defuse(text: str) -> str:
    """``text`` with marker look-alikes and line-leading passage numbers made inert."""
    text = _MARKER.sub(lambda m: "(" + "".join(m.group(1).split()) + m.group(2), text)
    return _LABEL.sub(r"\1(\2)", text)


def one_line(text: str) -> str:
    """A title or heading for a passage's header line: defused, on one line."""
    return " ".join(defuse(text).split())
