"""The agentic strategy: the model searches with the retrieval tool until it can answer."""

from __future__ import annotations

import asyncio
from typing import Any

from service.agent.model import ChatModel, ToolCallRequest
from service.agent.prompts import Message, agentic_messages, assistant_tool_calls, tool_result
from service.agent.run import Outcome, Run
from service.agent.tools import (
    RETRIEVAL_TOOL,
    format_error,
    format_sources,
    parse_call,
    result_summary,
)
from service.domain import ResponseStatus, ToolCallStatus
from service.errors import DeadlineExceeded, RagAgentError


async def run_agentic(
    run: Run, model: ChatModel, *, temperature: float, max_tool_rounds: int
) -> Outcome:
    request = run.request
    # A cheap search with the question itself first: when nothing at all is relevant the
    # answer is NO_ANSWER, and the model (slow, paid) is not asked.
    if not await run.search_hits(request.query, request.max_results):
        return await run.no_answer()

    messages: list[Message] = agentic_messages(request.query, request.history)
    searched = False
    for round_ in range(max_tool_rounds + 1):
        last = round_ == max_tool_rounds
        # Once the model has searched and found nothing, its text is held back: if it
        # answers anyway, the answer is NO_ANSWER, not its guess.
        empty_handed = searched and not run.book
        turn = await run.model_turn(
            model,
            messages,
            temperature=temperature,
            tools=[RETRIEVAL_TOOL],
            tool_choice="none" if last else None,
            hold=empty_handed,
        )
        if empty_handed and (not turn.tool_calls or last):
            return await run.no_answer()
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
        searched = True
    # The model still wanted to search after its last round: its text so far is the answer.
    await run.end_answer()
    return Outcome(ResponseStatus.SUCCESS, "max_tool_rounds", run.model_name)


async def _call_tools(run: Run, calls: list[ToolCallRequest]) -> list[str]:
    """Runs one turn's calls concurrently; returns what the model reads, in call order."""
    parsed = [parse_call(call.name, call.arguments) for call in calls]
    records = [await run.start_call(c, p.recorded) for c, p in zip(calls, parsed, strict=True)]
    results = [""] * len(calls)

    async def call_tool(index: int) -> None:
        record, args = records[index], parsed[index]
        if args.arguments is None:
            await run.end_call(record, ToolCallStatus.ERROR, error=args.error)
            results[index] = format_error(args.error)
            return
        limit = min(args.arguments.top_k, run.request.max_results)
        try:
            sources = await run.search(args.arguments.query, limit)
        except DeadlineExceeded:
            raise  # the run ends with TIMEOUT and closes every open call
        except RagAgentError as exc:
            await run.end_call(record, ToolCallStatus.ERROR, error=exc.message)
            raise
        await run.report_sources(record.id, sources)
        await run.end_call(record, ToolCallStatus.COMPLETED, result=result_summary(sources))
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
