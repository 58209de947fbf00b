"""What the model is told: system prompts, earlier turns, sources, tool traffic.

Messages are plain dicts in the Chat Completions format, which every OpenAI-compatible
server accepts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from service.agent.tools import TOOL_NAME, describe_source
from service.domain import ConversationTurn, Source

Message = dict[str, Any]

NO_ANSWER_MESSAGE = (
    "I could not find anything in the indexed documents that is relevant enough to answer "
    "this question, so I will not guess. Try rephrasing it, or ask about a topic the "
    "documents cover."
)

_CITING = (
    "Every passage has a number. After each statement, cite the passages that support it "
    "with their numbers in square brackets, like [1] or [2][3]. Cite only numbers of passages "
    "you were given. If the passages do not contain the answer, say that the documents do not "
    "cover it instead of answering from memory. Answer concisely, in the language of the "
    "question."
)

AGENTIC_SYSTEM_PROMPT = (
    "You answer questions about a collection of documents, using only what they say. "
    "The passages below were found by searching the documents for the question. If they "
    f"answer it, answer from them. If they are not enough, search with the {TOOL_NAME} "
    "tool, and search again with a different query when what you found is still not "
    "enough.\n\n" + _CITING + "\n\nPassages:\n\n"
)

GROUNDED_SYSTEM_PROMPT = (
    "You answer questions about a collection of documents, using only the passages below.\n\n"
    + _CITING
    + "\n\nPassages:\n\n"
)

# Citations in earlier answers point at that run's sources, which the model no longer sees;
# left in, it would copy numbers that now mean other passages.
_OLD_CITATION = re.compile(r"[ \t]*\[\d+(?:\s*,\s*\d+)*\]")


def history_messages(history: Sequence[ConversationTurn]) -> list[Message]:
    messages: list[Message] = []
    for turn in history:
        messages.append({"role": "user", "content": turn.question})
        messages.append({"role": "assistant", "content": _OLD_CITATION.sub("", turn.answer)})
    return messages


def agentic_messages(
    question: str, history: Sequence[ConversationTurn], sources: Sequence[Source]
) -> list[Message]:
    """The opening of a tool-calling run: instructions and sources, earlier turns, question.

    ``sources`` are what the server's own first search found, numbered. They go into the
    system message rather than into a replayed tool call (an assistant message with
    ``tool_calls`` the model never made, and its tool result): every OpenAI-compatible
    server takes a system message, while fabricated tool traffic trips up chat templates
    and servers that validate it. The numbers are the run's, so the model can cite them
    whether it answers at once or searches for more first. The user message stays the
    bare question, as stored in the conversation.
    """
    return _with_passages(AGENTIC_SYSTEM_PROMPT, question, history, sources)


def grounded_messages(
    question: str, history: Sequence[ConversationTurn], sources: Sequence[Source]
) -> list[Message]:
    """A run without tools: the numbered sources are part of the instructions."""
    return _with_passages(GROUNDED_SYSTEM_PROMPT, question, history, sources)


def _with_passages(
    prompt: str, question: str, history: Sequence[ConversationTurn], sources: Sequence[Source]
) -> list[Message]:
    passages = "\n\n".join(describe_source(source) for source in sources)
    return [
        {"role": "system", "content": prompt + passages},
        *history_messages(history),
        {"role": "user", "content": question},
    ]


def assistant_tool_calls(text: str, calls: Sequence[tuple[str, str, str]]) -> Message:
    """The model's tool-calling turn, replayed to it; calls are (id, name, raw arguments).

    Content is "" rather than null: some local servers reject a null content.
    """
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, name, args in calls
        ],
    }


def tool_result(call_id: str, content: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def retrieval_query(question: str, history: Sequence[ConversationTurn]) -> str:
    """The search text for a question asked without tools.

    A follow-up ("what about its sensors?") rarely names its subject; the previous question
    usually does, so it is searched together with it.
    """
    if not history:
        return question
    return f"{history[-1].question}\n{question}"
