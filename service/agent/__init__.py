"""The agent: answers a question from retrieved sources and streams the run as events.

Public surface: :class:`Agent` and :class:`AgentRequest`, the events in
:mod:`service.agent.events`, the :class:`ChatModel` protocol with its OpenAI implementation,
their configs (:class:`AgentConfig`, :class:`ModelClientConfig`) and
:func:`build_openai_client` for the composition root.
"""

from service.agent.config import AgentConfig, ModelClientConfig, StrategyName
from service.agent.events import (
    AgentEvent,
    AnswerDelta,
    CitationFound,
    Completed,
    Heartbeat,
    RunStarted,
    SourcesFound,
    ToolCallCompleted,
    ToolCallPending,
    ToolCallStarted,
)
from service.agent.model import ChatModel, OpenAIChatModel, build_openai_client
from service.agent.orchestrator import Agent
from service.agent.prompts import NO_ANSWER_MESSAGE
from service.agent.run import AgentRequest

__all__ = [
    "NO_ANSWER_MESSAGE",
    "Agent",
    "AgentConfig",
    "AgentEvent",
    "AgentRequest",
    "AnswerDelta",
    "ChatModel",
    "CitationFound",
    "Completed",
    "Heartbeat",
    "ModelClientConfig",
    "OpenAIChatModel",
    "RunStarted",
    "SourcesFound",
    "StrategyName",
    "ToolCallCompleted",
    "ToolCallPending",
    "ToolCallStarted",
    "build_openai_client",
]
