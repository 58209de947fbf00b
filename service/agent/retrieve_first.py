"""The retrieve_first strategy: one search, then one model call without tools.

It works with servers that have no tool calling, and costs one model turn. The search is
reported as a qdrant_retrieval tool call of the server's own ("srv_..." id), like every
retrieval.
"""

from __future__ import annotations

from service.agent.model import ChatModel
from service.agent.prompts import grounded_messages, retrieval_query
from service.agent.run import Outcome, Run
from service.domain import ResponseStatus


async def run_retrieve_first(run: Run, model: ChatModel, *, temperature: float) -> Outcome:
    request = run.request
    query = retrieval_query(request.query, request.history)
    sources = await run.retrieve(query, request.max_results)
    if not sources:
        return await run.no_answer()
    messages = grounded_messages(request.query, request.history, sources)
    turn = await run.model_turn(model, messages, temperature=temperature)
    await run.end_answer()
    return Outcome(ResponseStatus.SUCCESS, turn.finish_reason, turn.model)
