"""The agentic strategy: the model searches with the retrieval tool until it can answer.

The run starts with a search of its own for the question (a follow-up together with the
previous question), reported like every retrieval as a qdrant_retrieval tool call, with a
server id ("srv_..."). When it finds nothing relevant enough, the answer is NO_ANSWER and
the model (slow, paid) is not asked. Otherwise its sources are the run's first numbered
sources and the model gets them with its instructions (see :func:`agentic_messages`): it
may answer from them at once, citing [n], or call the tool for more.

Streaming order, and its one exception: a model turn's text streams as it comes. When the
model writes text and then asks for tools in the same turn, that text has already been
sent as answer deltas when the tool calls become known, so the tool events of that turn
come after answer deltas. The text stays part of the answer, and the next turn's text
starts a new paragraph. Holding text back until each turn ends would keep the documented
order but would buffer every turn in which tools are offered, which in this strategy is
every answer, so the accepted exception is the price of streaming.
"""

from __future__ import annotations

import asyncio
from typing import Any

from service.agent.model import ChatModel, ToolCallRequest
from service.agent.prompts import (
    Message,
    agentic_messages,
    assistant_tool_calls,
    retrieval_query,
    tool_result,
)
from service.agent.run import Outcome, Run
from service.agent.tools import RETRIEVAL_TOOL, format_error, format_sources, parse_call
from service.domain import ResponseStatus, ToolCallStatus
from service.errors import DeadlineExceeded


async def run_agentic(
    run: Run, model: ChatModel, *, temperature: float, max_tool_rounds: int
) -> Outcome:
    request = run.request
    query = retrieval_query(request.query, request.history)
    found = await run.retrieve(query, request.max_results)
    if not found:
        return await run.no_answer()

    messages: list[Message] = agentic_messages(request.query, request.history, found)
    for round_ in range(max_tool_rounds + 1):
        last = round_ == max_tool_rounds
        turn = await run.model_turn(
            model,
            messages,
            temperature=temperature,
            tools=[RETRIEVAL_TOOL],
            tool_choice="none" if last else None,
        )
        if not turn.tool_calls:
            await run.end_answer()
            return Outcome(ResponseStatus.SUCCESS, turn.finish_reason, turn.model)
        if last:
            break
        messages.append(
            assistant_tool_calls(turn.text, [(c.id, c.name, c.arguments) for c in turn.tool_calls])
        )
        results = await _call_tools(run, turn.tool_calls)
        messages.extend(tool_result(c.id, r) for c, r in zip(turn.tool_calls, results, strict=True))
    # The model still wanted to search after its last round: its text so far is the answer.
    await run.end_answer()
    return Outcome(ResponseStatus.SUCCESS, "max_tool_rounds", run.model_name)


async def _call_tools(run: Run, calls: list[ToolCallRequest]) -> list[str]:
    """Runs one turn's calls concurrently; returns what the model reads, in call order."""
    parsed = [parse_call(call.name, call.arguments) for call in calls]
    records = [
        await run.start_call(c.id, c.name, p.recorded) for c, p in zip(calls, parsed, strict=True)
    ]
    results = [""] * len(calls)

    async def call_tool(index: int) -> None:
        record, args = records[index], parsed[index]
        if args.arguments is None:
            await run.end_call(record, ToolCallStatus.ERROR, error=args.error)
            results[index] = format_error(args.error)
            return
        limit = min(args.arguments.top_k, run.request.max_results)
        sources = await run.run_retrieval(record, args.arguments.query, limit)
        results[index] = format_sources(sources)

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
