"""The agentic strategy: the model searches with the retrieval tool until it can answer.

The run starts with a search of its own for the question (a follow-up together with the
previous question), reported like every retrieval as a qdrant_retrieval tool call with a
server id ("srv_...") and origin "service". When it finds nothing relevant enough, the
answer is NO_ANSWER and the model is not asked. Otherwise the model gets those passages with
the question (see :func:`agentic_messages`) and the tool, with ``tool_choice: "auto"`` sent
explicitly (llama.cpp's chat formats ignore tools without it): it may answer at once,
citing [n], or call the tool for more (origin "model").

How tool calls are asked for depends on the endpoint (:mod:`tool_turns`): streamed where it
can stream them, decided by a non-streamed turn where it cannot (llama-cpp-python), and not
at all where it has no tool calling, in which case the run answers as retrieve_first from
the passages it has and says so (``strategy``).

Streaming order, and its one exception: a model turn's text streams as it comes. When the
model writes text and then asks for tools in the same turn, that text has already been
sent as answer deltas when the tool calls become known, so the tool events of that turn
come after answer deltas. The text stays part of the answer, and the next turn's text
starts a new paragraph.
"""

from __future__ import annotations

import asyncio
from typing import Any

from service.agent.budget import answer_room, fit_for, fit_passages, tools_tokens
from service.agent.model import ChatModel, ToolCallRequest
from service.agent.prompts import (
    Message,
    assistant_tool_calls,
    retrieval_query,
    tool_result,
)
from service.agent.retrieve_first import answer_from, run_retrieve_first
from service.agent.run import Outcome, Run, Turn
from service.agent.tool_turns import AGENT_TOOLS, tool_turn
from service.agent.tools import format_error, format_sources, parse_call
from service.domain import ResponseStatus, ToolCallStatus
from service.errors import DeadlineExceeded

RETRIEVE_FIRST = "retrieve_first"


async def run_agentic(
    run: Run, model: ChatModel, *, temperature: float, max_tool_rounds: int
) -> Outcome:
    if model.capabilities.tool_calling == "none":
        run.strategy = RETRIEVE_FIRST  # what runs is what the response names
        return await run_retrieve_first(run, model, temperature=temperature)
    request = run.request
    query = retrieval_query(request.query, request.history)
    found = await run.retrieve(query, request.max_results)
    if not found:
        return await run.no_answer()

    tools = AGENT_TOOLS
    fitted = await fit_for(
        model,
        request.query,
        history=request.history,
        sources=found,
        build=run.prompts.agentic,
        tools=tools,
    )
    messages: list[Message] = run.prompts.agentic(request.query, fitted.history, fitted.sources)
    window = await model.context_tokens()
    tool_tokens = tools_tokens(model.count_tokens, tools)
    turns = run.turns(model)
    for round_ in range(max_tool_rounds + 1):
        prompt = model.count_messages(messages) + tool_tokens
        room = answer_room(window, model.max_tokens, prompt)
        if round_ == max_tool_rounds:
            # The last round may not search again: the answer comes now.
            final = await turns.stream(
                messages, temperature=temperature, tools=tools, tool_choice="none", max_tokens=room
            )
            return await _last_round(run, model, final, temperature=temperature)
        turn = await tool_turn(run, turns, messages, temperature=temperature, max_tokens=room)
        if turn is None:  # the endpoint has no tool calling
            run.strategy = RETRIEVE_FIRST
            return await answer_from(run, model, found, temperature=temperature)
        if turn.declined is not None or not turn.tool_calls:
            return await _answered(run, turn)
        messages.append(
            assistant_tool_calls(turn.text, [(c.id, c.name, c.arguments) for c in turn.tool_calls])
        )
        # What the results may take: the window less the prompt so far and the answer.
        allowance = window - model.count_messages(messages) - tool_tokens - model.max_tokens
        results = await _call_tools(run, model, turn.tool_calls, allowance)
        messages.extend(tool_result(c.id, r) for c, r in zip(turn.tool_calls, results, strict=True))
    raise AssertionError("the last round returns")  # pragma: no cover


async def _last_round(run: Run, model: ChatModel, final: Turn, *, temperature: float) -> Outcome:
    """How the last round's turn ends the run."""
    if final.declined is not None:
        return await run.declined(final.declined, final.model)
    if final.tool_calls and not run.answer.strip():
        return await answer_without_tools(run, model, temperature=temperature)
    await run.end_answer()
    # A model that still asks for tools has its text so far as the answer.
    reason = "max_tool_rounds" if final.tool_calls else final.finish_reason
    return Outcome(ResponseStatus.SUCCESS, reason, final.model)


async def answer_without_tools(run: Run, model: ChatModel, *, temperature: float) -> Outcome:
    """The answer of a model that still asked for a search after its last round, without a
    word of answer (SmolLM2 on llama-cpp-python writes the call as text, whatever the
    tool_choice): one more turn offering no tool, over every passage the run found."""
    return await answer_from(run, model, run.book.all(), temperature=temperature)


async def _answered(run: Run, turn: Turn) -> Outcome:
    """A turn that ends the run: the model's answer, or its decline."""
    if turn.declined is not None:
        return await run.declined(turn.declined, turn.model)
    await run.end_answer()
    return Outcome(ResponseStatus.SUCCESS, turn.finish_reason, turn.model)


async def _call_tools(
    run: Run, model: ChatModel, calls: list[ToolCallRequest], allowance: int
) -> list[str]:
    """Runs one turn's calls concurrently; returns what the model reads, in call order.

    Every call of the turn is announced PENDING before the first one executes."""
    parsed = [parse_call(call.name, call.arguments) for call in calls]
    records = [
        await run.ask_call(c.id, c.name, p.recorded) for c, p in zip(calls, parsed, strict=True)
    ]
    results = [""] * len(calls)
    share = max(0, allowance) // max(1, len(calls))

    async def call_tool(index: int) -> None:
        record, args = records[index], parsed[index]
        await run.begin_call(record)
        if args.arguments is None:
            await run.end_call(record, ToolCallStatus.ERROR, error=args.error)
            results[index] = format_error(args.error)
            return
        limit = min(args.arguments.top_k, run.request.max_results)
        sources = await run.run_retrieval(record, args.arguments.query, limit)
        fitted = fit_passages(sources, share, model.count_tokens)
        results[index] = format_sources(fitted, run.prompts.code)

    try:
        async with asyncio.TaskGroup() as group:
            for index in range(len(calls)):
                group.create_task(call_tool(index), name=f"tool-{records[index].id}")
    except BaseExceptionGroup as failed:
        raise _first(failed) from None
    return results


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    """The error to report for a failed group: a deadline first, else the first failure."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        error = pending.pop(0)
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        else:
            leaves.append(error)
    for error in leaves:
        if isinstance(error, DeadlineExceeded):
            return error
    return leaves[0]
