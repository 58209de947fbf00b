"""The retrieve_first strategy: one search, then one model call without tools.

It works with servers that have no tool calling, and costs one model turn. The search is
reported as a qdrant_retrieval tool call of the service's own ("srv_..." id, origin
"service"), like every retrieval the model did not ask for.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.agent.budget import fit_for
from service.agent.model import ChatModel
from service.agent.prompts import retrieval_query
from service.agent.run import Outcome, Run
from service.domain import ResponseStatus, Source
from service.errors import ModelEmptyAnswer


async def run_retrieve_first(run: Run, model: ChatModel, *, temperature: float) -> Outcome:
    request = run.request
    query = retrieval_query(request.query, request.history)
    sources = await run.retrieve(query, request.max_results)
    if not sources:
        return await run.no_answer()
    return await answer_from(run, model, sources, temperature=temperature)


async def answer_from(
    run: Run, model: ChatModel, sources: Sequence[Source], *, temperature: float
) -> Outcome:
    """One streamed, tool-less answer from ``sources``, fitted into the model's window."""
    request = run.request
    fitted = await fit_for(
        model,
        request.query,
        history=request.history,
        sources=sources,
        build=run.prompts.grounded,
    )
    messages = run.prompts.grounded(request.query, fitted.history, fitted.sources)
    turn = await run.turns(model).stream(
        messages, temperature=temperature, max_tokens=fitted.max_tokens
    )
    if turn.declined is not None:
        return await run.declined(turn.declined, turn.model)
    if turn.tool_calls:  # offered none: a call written as text is still no answer
        raise ModelEmptyAnswer(
            f"the model wrote a call of the tool {turn.tool_calls[0].name!r} as text instead "
            "of an answer"
        )
    await run.end_answer()
    return Outcome(ResponseStatus.SUCCESS, turn.finish_reason, turn.model)
