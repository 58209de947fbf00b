"""The agents_sdk strategy: the agentic run, with the OpenAI Agents SDK running the loop.

What the caller sees is the agentic strategy's contract: the run's own first search (a
"srv_..." call), NO_ANSWER without asking the model when nothing is relevant, the passages
and the question as the opening, the qdrant_retrieval tool, the same events, citations,
records and statuses. What differs is who runs the loop: an SDK ``Agent`` with one
:class:`FunctionTool` over the run's retrieval, run by ``Runner.run_streamed`` with
``max_turns`` = RAGAGENT_MAX_TOOL_ROUNDS + 1 (the last turn answers, see
:mod:`service.agent.sdk.model`).

The SDK runs in a task of its own. It is owned here: however this coroutine ends (its
answer, an error, the run's deadline, the client's cancel), the SDK run is cancelled and
awaited before it returns, which closes the model's HTTP stream. The run's deadline bounds
the whole SDK run; when it passes, DeadlineExceeded leaves for the orchestrator to end the
run with TIMEOUT and the answer so far. The SDK wraps an exception of a tool in its own
UserError: the service's error inside is what leaves.

The SDK's tracing would send spans to OpenAI's tracing endpoint with OPENAI_API_KEY: it is
off (for the whole process) unless RAGAGENT_AGENTS_SDK_TRACING turns it on, and even then
no prompt, tool argument or answer goes into a span (``trace_include_sensitive_data``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import (
    Agent,
    AgentsException,
    FunctionTool,
    MaxTurnsExceeded,
    ModelSettings,
    RunConfig,
    Runner,
    set_tracing_disabled,
)
from agents.tool_context import ToolContext

from service.agent.agentic import answer_without_tools
from service.agent.budget import fit_for, fit_passages
from service.agent.model import ChatModel
from service.agent.prompts import Message, retrieval_query
from service.agent.retrieve_first import answer_from
from service.agent.run import Outcome, Run
from service.agent.sdk.model import RunModel, ToolBudget
from service.agent.tool_turns import AGENT_TOOLS, tool_calling
from service.agent.tools import (
    RETRIEVAL_TOOL,
    TOOL_NAME,
    format_error,
    format_sources,
    parse_call,
)
from service.domain import ResponseStatus, ToolCallStatus
from service.errors import DeadlineExceeded, RagAgentError

RETRIEVE_FIRST = "retrieve_first"
_AGENT_NAME = "ragagent"


class AgentsSdkStrategy:
    """Runs one request's agent on the SDK; one object per process, state per run."""

    def __init__(self, *, tracing: bool) -> None:
        self._tracing = tracing
        set_tracing_disabled(not tracing)  # the SDK's switch is process-wide

    async def run(
        self, run: Run, model: ChatModel, *, temperature: float, max_tool_rounds: int
    ) -> Outcome:
        request = run.request
        found = await run.retrieve(
            retrieval_query(request.query, request.history), request.max_results
        )
        if not found:
            return await run.no_answer()
        if await tool_calling(model, run.deadline) == "none":
            run.strategy = RETRIEVE_FIRST  # as the agentic strategy: what runs is named
            return await answer_from(run, model, found, temperature=temperature)
        fitted = await fit_for(
            model,
            request.query,
            history=request.history,
            sources=found,
            build=run.prompts.agentic,  # the operator's opening, the caller's addendum
            tools=AGENT_TOOLS,
        )
        instructions, opening = _split(
            run.prompts.agentic(request.query, fitted.history, fitted.sources)
        )
        turns = run.turns(model)
        sdk_model = RunModel(
            run,
            turns,
            window=await model.context_tokens(),
            max_turns=max_tool_rounds + 1,
            max_tokens=model.max_tokens,
        )
        agent: Agent[None] = Agent(
            name=_AGENT_NAME,
            instructions=instructions,
            tools=[retrieval_tool(run, model, sdk_model.budget)],
            model=sdk_model,
            model_settings=ModelSettings(temperature=temperature),
        )
        result = Runner.run_streamed(
            agent,
            opening,  # type: ignore[arg-type]  # role/content messages are input items
            max_turns=max_tool_rounds + 1,
            run_config=RunConfig(
                tracing_disabled=not self._tracing,
                trace_include_sensitive_data=False,
                workflow_name=_AGENT_NAME,
                # A traced run is found by its request, session and the caller's labels.
                group_id=request.session_id or None,
                trace_metadata={**request.metadata, "request_id": request.request_id},
            ),
        )
        try:
            async with asyncio.timeout(run.deadline.remaining()):
                async for _ in result.stream_events():
                    pass  # the answer and the tool calls are reported where they happen
        except TimeoutError:
            raise DeadlineExceeded("the deadline ran out during the agent run") from None
        except MaxTurnsExceeded:
            # Not expected (the last turn offers no tool), but the limit ends with an answer.
            sdk_model.finish_reason = "max_tool_rounds"
        except AgentsException as exc:
            error = _service_error(exc)
            if error is exc:
                raise
            raise error from exc
        finally:
            task = result.run_loop_task
            if task is not None and not task.done():
                result.cancel()
                await asyncio.wait({task})
        if sdk_model.declined is not None:
            return await run.declined(sdk_model.declined, sdk_model.model_name)
        if sdk_model.finish_reason == "max_tool_rounds" and not run.answer.strip():
            return await answer_without_tools(run, model, temperature=temperature)
        await run.end_answer()
        return Outcome(ResponseStatus.SUCCESS, sdk_model.finish_reason, sdk_model.model_name)


def retrieval_tool(run: Run, model: ChatModel, budget: ToolBudget) -> FunctionTool:
    """qdrant_retrieval as an SDK function tool: the schema the agentic strategy offers,
    the arguments read by :func:`parse_call` (a bad call is an ERROR record and a result
    the model reads, never an exception), the search and its events the run's. The call
    was recorded PENDING when the model's turn ended (:class:`RunModel`); it starts here."""

    async def invoke(context: ToolContext[Any], raw_arguments: str) -> str:
        asked = budget.asked.pop(context.tool_call_id, None)
        if asked is None:  # not one of the turn's calls as the model wrote them
            parsed = parse_call(TOOL_NAME, raw_arguments)
            record = await run.ask_call(context.tool_call_id, TOOL_NAME, parsed.recorded)
        else:
            record, parsed = asked
        await run.begin_call(record)
        if parsed.arguments is None:
            await run.end_call(record, ToolCallStatus.ERROR, error=parsed.error)
            return format_error(parsed.error)
        limit = min(parsed.arguments.top_k, run.request.max_results)
        sources = await run.run_retrieval(record, parsed.arguments.query, limit)
        fitted = fit_passages(sources, budget.share(), model.count_tokens)
        return format_sources(fitted, run.prompts.code)

    function = RETRIEVAL_TOOL["function"]
    return FunctionTool(
        name=TOOL_NAME,
        description=function["description"],
        params_json_schema=function["parameters"],
        on_invoke_tool=invoke,
        # The schema has optional fields with defaults; the arguments are checked above.
        strict_json_schema=False,
    )


def _split(messages: list[Message]) -> tuple[str, list[Message]]:
    """The system message becomes the SDK agent's instructions; the rest is its input."""
    first, *rest = messages
    if first["role"] != "system":
        raise AssertionError("the agentic opening starts with its instructions")
    return str(first["content"]), rest


def _service_error(error: BaseException) -> BaseException:
    """The service's error inside the SDK's (a tool's failure arrives as its UserError)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, RagAgentError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return error
