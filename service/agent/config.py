"""The agent's and the model client's own configs: what the composition root hands them.

Components below the root never read ``Settings``; ``service.configs`` translates the
RAGAGENT_ settings into these. The defaults are the settings' defaults (a test holds them
equal), so a test or an embedding program can build an agent from a config alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from service.agent.capabilities import ToolCalling

StrategyName = Literal["agentic", "agents_sdk", "retrieve_first", "extractive"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentConfig:
    """How the agent answers (RAGAGENT_AGENT_STRATEGY and the strategies' limits)."""

    strategy: StrategyName = "extractive"
    # True when the operator left the choice to the server (auto): only then may a request
    # with a short deadline be answered by a faster strategy than ``strategy``.
    auto: bool = False
    confidence_threshold: float = 0.35
    temperature: float = 0.2
    max_tool_rounds: int = 4
    heartbeat_interval: float = 5.0
    extractive_sentences: int = 6
    extractive_candidates: int = 24
    agents_sdk_tracing: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelClientConfig:
    """The OpenAI-compatible endpoint and the clocks of its calls (RAGAGENT_LLM_*)."""

    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    model: str = "gpt-4o-mini"
    max_tokens: int = 1024
    timeout: float = 60.0
    max_retries: int = 2
    idle_timeout: float = 30.0
    first_token_timeout: float = 180.0
    context_tokens: int | None = None
    # None: learned from the endpoint once (RAGAGENT_LLM_TOOL_CALLING=auto).
    tool_calling: ToolCalling | None = None
