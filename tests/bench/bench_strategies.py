"""What the Agents SDK costs a run: agents_sdk against agentic, interleaved, same script.

Both strategies answer the same question against the scripted model (one tool call, then a
40-piece answer) and a canned store, one run of each in turn, so that the machine's load
falls on both alike. Measured per run: wall time and this process's CPU time (which holds
the service's work and the fake server's, the same for both). The model costs nothing
here, so the ratio is the SDK's overhead at its most visible; with a real model a turn takes
seconds and the difference disappears in it.
"""

from __future__ import annotations

import statistics
import time

import openai

from service.agent import Agent, AgentRequest, Completed, OpenAIChatModel
from service.agent.config import StrategyName
from service.configs import agent_config, model_client_config
from service.domain import ResponseStatus
from tests.agent.support import FakeRetriever, chunk, settings
from tests.bench.common import report
from tests.fakes.openai_server import ChatReply, FakeOpenAI, ToolCallScript

QUESTION = "What is a URDF link?"
LINK = chunk("urdf-link", "A link is a rigid body with inertia, visual and collision elements.")
RUNS = 60
# The SDK's loop may cost something, not dominate a run.
TARGET = 2.0


async def _run(agent: Agent) -> None:
    async for event in agent.run(AgentRequest(QUESTION)):
        if isinstance(event, Completed):
            assert event.result.status is ResponseStatus.SUCCESS, event.result
            return
    raise AssertionError("the run ended without Completed")


async def main() -> None:
    retriever = FakeRetriever()
    retriever.add(QUESTION, (LINK, 0.8))
    retriever.add("links", (LINK, 0.8))
    wall: dict[str, list[float]] = {"agentic": [], "agents_sdk": []}
    cpu: dict[str, list[float]] = {"agentic": [], "agents_sdk": []}
    async with FakeOpenAI() as fake:
        config = settings(llm_base_url=fake.base_url, llm_context_tokens=8192)
        async with openai.AsyncOpenAI(api_key="k", base_url=fake.base_url) as client:
            model = OpenAIChatModel.from_config(client, model_client_config(config))
            strategies: list[StrategyName] = ["agentic", "agents_sdk"]
            agents = {
                s: Agent(agent_config(config), retriever=retriever, model=model, strategy=s)
                for s in strategies
            }
            for index in range(RUNS + 1):
                for name in strategies if index % 2 else reversed(strategies):
                    fake.script_chat(
                        ChatReply.calls(ToolCallScript("qdrant_retrieval", '{"query": "links"}')),
                        ChatReply.text("A link is a rigid body [1]. " * 8, pieces=40),
                    )
                    began, began_cpu = time.perf_counter(), time.process_time()
                    await _run(agents[name])
                    if index:  # the first round warms up
                        wall[name].append(time.perf_counter() - began)
                        cpu[name].append(time.process_time() - began_cpu)

    def ms(samples: list[float]) -> str:
        return f"p50 {statistics.median(samples) * 1000:.2f} ms"

    for label, samples in (("wall", wall), ("CPU", cpu)):
        sdk, base = samples["agents_sdk"], samples["agentic"]
        report(
            f"agents_sdk run {label} time ({RUNS} runs, interleaved, scripted model)",
            ms(sdk),
            f"agentic {ms(base)}",
            statistics.median(sdk) / statistics.median(base),
            f"target <= {TARGET}",
        )
