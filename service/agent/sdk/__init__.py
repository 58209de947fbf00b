"""The agents_sdk strategy: the agentic run on the OpenAI Agents SDK (``openai-agents``).

The SDK is an optional extra (``ragagent[agents-sdk]``): this package imports it only when
the strategy is selected, and selecting it without the extra is a start-up error that says
how to install it. See :mod:`service.agent.sdk.strategy`.
"""

from __future__ import annotations

from typing import Protocol

from service.agent.model import ChatModel
from service.agent.run import Outcome, Run
from service.errors import ConfigurationError

INSTALL_HINT = "pip install 'ragagent[agents-sdk]'"


class SdkStrategy(Protocol):
    async def run(
        self, run: Run, model: ChatModel, *, temperature: float, max_tool_rounds: int
    ) -> Outcome: ...


def load_agents_sdk(*, tracing: bool) -> SdkStrategy:
    """The strategy, with the SDK imported now; ``tracing``: the SDK's own tracing stays on
    (RAGAGENT_AGENTS_SDK_TRACING), else it is switched off for the whole process."""
    try:
        from service.agent.sdk.strategy import AgentsSdkStrategy
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "agents":
            raise
        raise ConfigurationError(
            "RAGAGENT_AGENT_STRATEGY=agents_sdk needs the OpenAI Agents SDK, an optional "
            f"extra: {INSTALL_HINT} ({exc})"
        ) from exc
    return AgentsSdkStrategy(tracing=tracing)
