"""What a model turn is, when its text is not an answer: a decline, or a tool call as text.

The model says that the passages do not answer the question in one of two ways, whichever
the endpoint can carry: the ``no_answer`` tool (offered wherever tools are, with a
``reason``), or, on a turn without tools, a reply that opens with ``NO_ANSWER:`` and the
reason. Both become status NO_ANSWER with the reason (see :meth:`Run.declined`).

Some endpoints write a tool call as plain text instead of a structured call:
llama-cpp-python's ``chatml-function-calling`` format, when its own parser misses, returns
the template's syntax as the message (``functions.qdrant_retrieval:\\n{ "query": ... }``,
the quotes sometimes HTML-escaped as ``&#34;``). Such a turn is a tool call, never an
answer: it is parsed into calls here (a truncated argument object is repaired as far as its
query goes; what cannot be read reaches the tool as raw text, which records an ERROR the
model reads).

While a streamed turn begins, :class:`Opening` holds its text back until it can tell which
of the three it is: only the few characters that could still open a marker wait, so an
answer streams as before.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from dataclasses import dataclass
from typing import Literal

from service.agent.assembly import ToolCallRequest

NO_ANSWER_TOOL_NAME = "no_answer"
NO_ANSWER_MARK = "NO_ANSWER:"
_TOOL_TEXT_MARK = "functions."
_MARKS = (NO_ANSWER_MARK, _TOOL_TEXT_MARK)
# The longest reason kept: a model that writes a whole answer as its reason is cut short.
MAX_REASON_CHARS = 500

NO_ANSWER_TOOL: dict[str, object] = {
    "type": "function",
    "function": {
        "name": NO_ANSWER_TOOL_NAME,
        "description": (
            "Call this instead of answering when the passages you have do not contain the "
            "answer to the question (for example: they name the subject but not the asked "
            "fact). Give the reason in one sentence."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "reason": {
                    "type": "string",
                    "description": "What the documents lack, in one sentence.",
                }
            },
            "required": ["reason"],
            "additionalProperties": False,
        },
    },
}

Kind = Literal["text", "no_answer", "tool_text"]

_TOOL_TEXT = re.compile(r"functions\.([A-Za-z0-9_-]+)\s*:\s*", re.DOTALL)
_QUERY = re.compile(r'"query"\s*:\s*"((?:[^"\\]|\\.)*)')


def classify(text: str) -> Kind | None:
    """What a turn that starts with ``text`` is; None while it could still be either."""
    start = text.lstrip()
    if not start:
        return None
    unescaped = html.unescape(start)
    for mark in _MARKS:
        if unescaped.startswith(mark):
            return "no_answer" if mark == NO_ANSWER_MARK else "tool_text"
        if mark.startswith((unescaped, start)):
            return None
    return "text"


def declined_message(reason: str) -> str:
    """The answer of a run the model declined: says so, with the model's reason."""
    if not reason:
        return "The indexed documents do not answer this question."
    return f"The indexed documents do not answer this question: {reason}"


def reason_of_text(text: str) -> str:
    """The reason a ``NO_ANSWER:`` reply gives ("" when it gives none)."""
    body = html.unescape(text.lstrip()).removeprefix(NO_ANSWER_MARK)
    return clip(body)


def clip(reason: str) -> str:
    reason = " ".join(reason.split())
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1].rstrip() + "…"
    return reason


def reason_of_call(arguments: str) -> str:
    """The reason in a no_answer call's arguments (the raw text when it is not JSON)."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return clip(arguments)
    if isinstance(value, dict) and isinstance(value.get("reason"), str):
        return clip(value["reason"])
    return clip(arguments) if not isinstance(value, dict) else ""


def calls_of_text(text: str) -> list[ToolCallRequest]:
    """The tool calls a turn wrote as text (``functions.<name>: {...}``, one or more)."""
    body = html.unescape(text)
    found = list(_TOOL_TEXT.finditer(body))
    calls: list[ToolCallRequest] = []
    for index, match in enumerate(found):
        end = found[index + 1].start() if index + 1 < len(found) else len(body)
        arguments = body[match.end() : end].strip()
        calls.append(
            ToolCallRequest(f"call_text_{uuid.uuid4().hex[:16]}", match[1], _repair(arguments))
        )
    return calls


def _repair(arguments: str) -> str:
    """The arguments as JSON when they are, or when their query can be read (a turn cut
    short by its token limit); else as written, for the tool to refuse."""
    try:
        json.loads(arguments)
    except json.JSONDecodeError:
        query = _QUERY.search(arguments)
        if query is None:
            return arguments
        try:
            value = json.loads(f'"{query[1]}"')
        except json.JSONDecodeError:
            return arguments
        return json.dumps({"query": value})
    return arguments


@dataclass(slots=True)
class Opening:
    """The start of a streamed turn, held back until :func:`classify` decides."""

    held: str = ""
    kind: Kind | None = None

    def feed(self, text: str) -> str:
        """The text that may be written now ("" while held or not an answer)."""
        if self.kind == "text":
            return text
        self.held += text
        if self.kind is None:
            self.kind = classify(self.held)
            if self.kind == "text":
                released, self.held = self.held, ""
                return released
        return ""

    def finish(self) -> str:
        """At the turn's end: text still held that turned out to be an answer after all."""
        if self.kind is None:
            self.kind = "text"
            released, self.held = self.held, ""
            return released
        return ""
