"""Fitting a prompt into the model's context window.

The window must hold the instructions, the passages, the earlier turns, the question, the
tool definitions and the answer still to be written. When it cannot, what goes first is
what matters least to this question: the oldest turns, then the lowest-scored passages
(one is always kept), then part of the room reserved for the answer, down to
:data:`MIN_ANSWER_TOKENS`. Below that, the run fails with MODEL_CONTEXT_EXCEEDED rather
than send a prompt the server would cut or refuse (llama.cpp answers an overflowing
streamed prompt with an empty body, which once came back as SUCCESS with no answer).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.agent.capabilities import MESSAGE_OVERHEAD_TOKENS
from service.domain import ConversationTurn, Source
from service.errors import ModelContextExceeded
from service.observability.logging import get_logger

if TYPE_CHECKING:
    from service.agent.model import ChatModel

log = get_logger("ragagent.agent")

# Fewer tokens than this for the answer is no answer worth asking for.
MIN_ANSWER_TOKENS = 64


@dataclass(frozen=True, slots=True)
class Fitted:
    """What goes into the prompt, and how much room the answer gets."""

    history: list[ConversationTurn]
    sources: list[Source]
    max_tokens: int
    prompt_tokens: int
    dropped_turns: int = 0
    dropped_sources: int = 0
    shrunk_answer: bool = False


def tools_tokens(count: Callable[[str], int], tools: Sequence[dict[str, Any]]) -> int:
    """Tool definitions are rendered into the prompt by the server's chat template."""
    return sum(count(json.dumps(tool)) for tool in tools)


def fit_prompt(
    *,
    window: int,
    max_tokens: int,
    build: Callable[[list[ConversationTurn], list[Source]], list[dict[str, Any]]],
    count: Callable[[list[dict[str, Any]]], int],
    history: Sequence[ConversationTurn],
    sources: Sequence[Source],
    extra_tokens: int = 0,
) -> Fitted:
    """Chooses the turns and passages that fit; ``build`` makes the messages from them,
    ``count`` counts their tokens, ``extra_tokens`` is what else the prompt carries (tools)."""
    turns = list(history)
    kept = list(sources)

    def prompt() -> int:
        return count(build(turns, kept)) + extra_tokens

    used = prompt()
    while turns and used + max_tokens > window:
        turns.pop(0)
        used = prompt()
    while len(kept) > 1 and used + max_tokens > window:
        kept.remove(min(kept, key=lambda s: s.hit.score))
        used = prompt()
    answer = min(max_tokens, window - used)
    if answer < min(MIN_ANSWER_TOKENS, max_tokens):
        raise ModelContextExceeded(
            f"the prompt takes about {used} tokens of the model's {window}-token window even "
            f"with no earlier turns and one passage, leaving {max(answer, 0)} for the answer: "
            "ask a shorter question, or check RAGAGENT_LLM_CONTEXT_TOKENS"
        )
    fitted = Fitted(
        history=turns,
        sources=kept,
        max_tokens=answer,
        prompt_tokens=used,
        dropped_turns=len(history) - len(turns),
        dropped_sources=len(sources) - len(kept),
        shrunk_answer=answer < max_tokens,
    )
    if fitted.dropped_turns or fitted.dropped_sources or fitted.shrunk_answer:
        log.info(
            "prompt fitted to the context window",
            window=window,
            prompt_tokens=used,
            dropped_turns=fitted.dropped_turns,
            dropped_passages=fitted.dropped_sources,
            max_tokens=answer,
        )
    return fitted


def answer_room(window: int, max_tokens: int, prompt_tokens: int) -> int:
    """Tokens a later turn (after tool results) may write; raises when none are left."""
    room = min(max_tokens, window - prompt_tokens)
    if room < min(MIN_ANSWER_TOKENS, max_tokens):
        raise ModelContextExceeded(
            f"the conversation with its tool results takes about {prompt_tokens} tokens of the "
            f"model's {window}-token window, leaving no room for the answer"
        )
    return room


async def fit_for(
    model: ChatModel,
    question: str,
    *,
    history: Sequence[ConversationTurn],
    sources: Sequence[Source],
    build: Callable[[str, Sequence[ConversationTurn], Sequence[Source]], list[dict[str, Any]]],
    tools: Sequence[dict[str, Any]] = (),
) -> Fitted:
    """:func:`fit_prompt` for ``model``'s window and tokenizer."""
    return fit_prompt(
        window=await model.context_tokens(),
        max_tokens=model.max_tokens,
        build=lambda turns, kept: build(question, turns, kept),
        count=model.count_messages,
        history=history,
        sources=sources,
        extra_tokens=tools_tokens(model.count_tokens, tools),
    )


def fit_passages(
    sources: Sequence[Source], allowance: int, count: Callable[[str], int]
) -> list[Source]:
    """The best-scored passages whose text fits ``allowance`` tokens, in their order; a
    tool result must not push the conversation out of the window."""
    chosen: set[int] = set()
    used = 0
    for source in sorted(sources, key=lambda s: s.hit.score, reverse=True):
        cost = count(source.hit.chunk.text) + MESSAGE_OVERHEAD_TOKENS
        if used + cost > allowance:
            continue
        chosen.add(id(source))
        used += cost
    return [source for source in sources if id(source) in chosen]
