"""AgentService: Retrieve here; Ask and AskStream are driven by the agent orchestrator."""

from __future__ import annotations

import time
from typing import Any

import grpc
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.api.convert import duration, filters_from_proto, hit_to_proto
from service.domain import Deadline
from service.retrieval.base import Embedder, Retriever

DEFAULT_MAX_RESULTS = 5


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    """Converts AgentService messages to domain calls and back."""

    def __init__(
        self, retriever: Retriever, embedder: Embedder, *, default_threshold: float
    ) -> None:
        self._retriever = retriever
        self._embedder = embedder
        self._default_threshold = default_threshold

    async def Retrieve(
        self,
        request: agent_pb2.RetrieveRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> agent_pb2.RetrieveResponse:
        started = time.perf_counter()
        hits = await self._retriever.search(
            request.query,
            limit=request.max_results if request.HasField("max_results") else DEFAULT_MAX_RESULTS,
            threshold=(
                request.confidence_threshold
                if request.HasField("confidence_threshold")
                else self._default_threshold
            ),
            filters=filters_from_proto(request.filters),
            deadline=Deadline.after(context.time_remaining()),
        )
        return agent_pb2.RetrieveResponse(
            sources=[hit_to_proto(hit) for hit in hits],
            took=duration(time.perf_counter() - started),
            embedding_model=self._embedder.model_name,
        )
