"""The model's "not in the documents" and tool calls written as text, against the real model
(llama-cpp-python's server, ``chatml-function-calling``, SmolLM2-135M-Instruct; issue 27).

SmolLM2 judges poorly whether passages answer a question; what must hold is the path: the
endpoint's own no_answer call is read as a decline with its reason, and whatever the model
writes, a run never ends SUCCESS with the endpoint's tool-call syntax as its answer. These
runs are also the suite's agentic runs against the real model (tool calling learned, the
model's own tool calls, what ran named in the response).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import openai
import pytest

from service.agent.config import StrategyName
from service.agent.prompts import Prompts
from service.agent.sources import SourceBook
from service.agent.tool_turns import AGENT_TOOLS
from service.agent.turns import read_turn
from service.domain import Deadline, ResponseStatus, RunResult
from service.errors import RagAgentError
from tests.realmodel.support import KeywordRetriever, ModelServer, record
from tests.realmodel.test_llama_cpp import agent_for, ask, check_origins, config


@pytest.fixture
async def client(model_server: ModelServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(api_key="none", base_url=model_server.base_url) as c:
        yield c


pytestmark = [pytest.mark.realmodel, pytest.mark.slow, pytest.mark.timeout(900)]

# Seen with this model: the answer was "functions.qdrant_retrieval:\n{ &#34;query&#34; : ...".
TOPIC = "What is a ROS 2 topic?"
# The documents name the subject but not the asked fact.
UNANSWERABLE = "How long does ASIMO's battery last?"


def assert_never_tool_syntax(result: RunResult | RagAgentError) -> None:
    if isinstance(result, RagAgentError):
        assert result.reason != "INTERNAL", result.message
        return
    if result.status is ResponseStatus.SUCCESS:
        assert "functions." not in result.answer, result.answer
        assert "&#34;" not in result.answer, result.answer
        assert result.answer.strip()
    if result.status is ResponseStatus.NO_ANSWER:
        assert result.no_answer_reason
        assert not result.sources


@pytest.mark.parametrize("strategy", ["agentic", "agents_sdk", "retrieve_first"])
async def test_a_real_run_never_passes_its_tool_call_text_off_as_an_answer(
    model_server: ModelServer, client: openai.AsyncOpenAI, strategy: StrategyName
) -> None:
    """Also, for the strategies that offer the model a tool: the endpoint's tool calling is
    learned (llama-cpp-python cannot stream tool calls: HTTP 200, an empty body), and what
    ran is what the response names (the strategy, or retrieve_first after a fallback)."""
    agent, model = agent_for(config(model_server, max_tool_rounds=2), client, strategy)
    outcomes: dict[str, object] = {}
    totals, cpu = [], []
    for question in (TOPIC, UNANSWERABLE):
        began = time.process_time()
        result = await ask(agent, question)
        cpu.append(time.process_time() - began)  # this process's: the service, not the model
        assert_never_tool_syntax(result)
        if isinstance(result, RunResult):
            check_origins(result)
            totals.append(result.timings.total_s)
            if strategy != "retrieve_first":
                fell_back = model.capabilities.tool_calling == "none"
                assert result.strategy == ("retrieve_first" if fell_back else strategy)
            outcomes[question] = {
                "status": result.status.value,
                "no_answer_reason": result.no_answer_reason[:160],
                "answer": result.answer[:160],
                "model tool calls": sum(c.origin == "model" for c in result.tool_calls),
            }
        else:
            outcomes[question] = f"{result.reason}: {result.message[:160]}"
    record(f"declines {strategy}", outcomes)
    record(f"{strategy} answer s", [round(t, 2) for t in totals])
    record(f"{strategy} service CPU s per run", [round(t, 3) for t in cpu])
    if strategy != "retrieve_first":
        assert model.capabilities.tool_calling == "non_streamed"
        assert totals, "no run of the strategy completed"


async def test_the_endpoints_own_no_answer_call_is_read_as_a_decline(
    model_server: ModelServer, client: openai.AsyncOpenAI
) -> None:
    """The call as llama-cpp-python's chat format writes it (the tool forced, so that the
    small model's judgement does not decide whether the path runs)."""
    _, model = agent_for(config(model_server), client, "agentic")
    hits = await KeywordRetriever().search(UNANSWERABLE, limit=2, threshold=0.3)
    messages = Prompts().agentic(UNANSWERABLE, [], list(SourceBook().add(hits)))
    completion = await model.complete(
        messages,
        temperature=0.0,
        deadline=Deadline.after(300),
        tools=AGENT_TOOLS,
        tool_choice={"type": "function", "function": {"name": "no_answer"}},  # type: ignore[arg-type]
        max_tokens=64,
    )
    turn = read_turn(completion.text, completion.end)
    record(
        "forced no_answer call",
        {
            "text": completion.text[:160],
            "calls": [(c.name, c.arguments[:160]) for c in completion.end.tool_calls],
            "declined": turn.declined,
        },
    )
    assert turn.declined is not None, (completion.text, completion.end.tool_calls)
    assert not turn.tool_calls
