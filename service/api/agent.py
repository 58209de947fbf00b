"""AgentService: proto in, agent and session calls, proto out.

A follow-up's turn is opened before the run, a new session's beside it (the first token
never waits for its write), and closed with the result before the final message is sent
(:mod:`service.api.turn_record`); a run that fails, times out or is cancelled closes its
turn with that status, so the record never holds half a turn. A run that fails once started
(the model, the store), or that the server stops on shutdown, ends with a final message of
status ERROR or CANCELLED (its partial answer) and then its error, and its turn is recorded
with that status and why, never completed, so that it is not replayed to the model. A run
whose caller cancels can be sent nothing; its turn is recorded CANCELLED with what its events
had produced. The deadline given to the agent is the call's, less a small margin, so that a
run that runs out of time can still send its final message with status TIMEOUT.

Per-request model settings: ``model`` must be one the operator allows (else
INVALID_ARGUMENT naming the field); the bounds of ``max_tokens`` and ``instructions`` are
the proto's, checked by the validation interceptor before this servicer sees the request.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Sequence
from dataclasses import replace
from typing import Any

import grpc
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from service.agent import Agent, AgentEvent, AgentRequest, Completed
from service.api.convert import duration, filters_from_proto, hit_to_proto, result_to_proto
from service.api.identity import caller_access, caller_identity
from service.api.interceptors import current_request_id
from service.api.partial import PartialRun
from service.api.runs import STATUS_PROTO, BackgroundRuns, new_run_id
from service.api.stream_messages import event_message
from service.api.turn_record import TurnRecord
from service.domain import Deadline, ResponseStatus, SearchFilters
from service.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
)
from service.observability.logging import get_logger
from service.observability.runs import RunListener, Subscribers
from service.retrieval.base import Embedder, Retriever
from service.sessions.turns import Turns

log = get_logger("ragagent.api")

DEFAULT_MAX_RESULTS = 5
# Time kept back from the caller's deadline to send the final message of a timed-out run.
DEADLINE_MARGIN_S = 0.25


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    """Converts AgentService messages to domain calls and back."""

    def __init__(
        self,
        retriever: Retriever,
        embedder: Embedder,
        *,
        default_threshold: float,
        agent: Agent | None = None,
        turns: Turns | None = None,
        listeners: Sequence[RunListener] = (),
        allowed_models: Collection[str] = (),
        unlabelled_public: bool = False,
        runs: BackgroundRuns | None = None,
    ) -> None:
        """``allowed_models``: the names a request may choose as ``model`` (the operator's
        RAGAGENT_LLM_ALLOWED_MODELS, with the configured model). ``unlabelled_public``:
        unlabelled documents are readable by every caller (RAGAGENT_ACCESS_UNLABELLED).
        ``runs``: where background runs go (None: ``background`` is refused)."""
        self._runs = runs
        self._unlabelled_public = unlabelled_public
        self._allowed_models = frozenset(allowed_models)
        self._retriever = retriever
        self._embedder = embedder
        self._default_threshold = default_threshold
        self._agent = agent
        self._turns = turns
        # Metrics, tool spans and the run log: each sees every event of every run once.
        self._listeners = tuple(listeners)

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
            filters=self._filters(request.filters),
            deadline=Deadline.after(context.time_remaining()),
        )
        return agent_pb2.RetrieveResponse(
            sources=[hit_to_proto(hit) for hit in hits],
            took=duration(time.perf_counter() - started),
            embedding_model=self._embedder.model_name,
        )

    async def AskStream(
        self,
        request: agent_pb2.QuestionRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[agent_pb2.AskStreamResponse]:
        if request.background:
            stream = self._background(request, context.time_remaining())
        else:
            stream = self._stream(request, context.time_remaining())
        async for message in stream:
            yield message

    async def Ask(
        self,
        request: agent_pb2.QuestionRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> agent_pb2.AgentResponse:
        if request.background:
            final = None
            # Read to the end: a run that failed raises its error after its final message.
            async for message in self._background(request, context.time_remaining()):
                if message.HasField("completed"):
                    final = message.completed
            if final is None:
                raise RuntimeError("a background run ended without a final message")
            return final
        async for event in self._run(request, context.time_remaining()):
            if isinstance(event, Completed):
                if event.error is not None:
                    raise event.error
                if event.result.status is ResponseStatus.TIMEOUT:
                    raise DeadlineExceeded("the deadline ran out before the answer was complete")
                return result_to_proto(event.result)
        raise RuntimeError("the agent ended a run without a Completed event")

    async def ResumeStream(
        self,
        request: agent_pb2.ResumeStreamRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[agent_pb2.AskStreamResponse]:
        runs = self._background_runs()
        async for message in runs.follow(request.run_id, caller_identity(), request.after_sequence):
            yield message

    async def CancelRun(
        self,
        request: agent_pb2.CancelRunRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> agent_pb2.CancelRunResponse:
        status = await self._background_runs().cancel(request.run_id, caller_identity())
        return agent_pb2.CancelRunResponse(run_id=request.run_id, status=STATUS_PROTO[status])

    async def _stream(
        self, request: agent_pb2.QuestionRequest, remaining: float | None, run_id: str = ""
    ) -> AsyncGenerator[agent_pb2.AskStreamResponse, None]:
        """The run as stream messages, ending as the proto promises: after a final message
        of status ERROR with the error, after one of status TIMEOUT with DEADLINE_EXCEEDED."""
        sequence = 0
        async for event in self._run(request, remaining):
            sequence += 1
            yield event_message(event, sequence, run_id)
            if isinstance(event, Completed) and event.error is not None:
                raise event.error  # the final message (status ERROR) came first, as promised
            if isinstance(event, Completed) and event.result.status is ResponseStatus.TIMEOUT:
                raise DeadlineExceeded(
                    "the deadline ran out; the final message holds the answer produced so far"
                )

    async def _background(
        self, request: agent_pb2.QuestionRequest, remaining: float | None
    ) -> AsyncIterator[agent_pb2.AskStreamResponse]:
        """Starts the run as a background run and follows it; leaving stops the following,
        not the run."""
        runs = self._background_runs()
        if not runs.keeps_content:
            raise FailedPrecondition(
                "this server records no content (RAGAGENT_RECORD_CONTENT=false), so it cannot "
                "keep a background run's answer; ask without background"
            )
        self._check_model(request.model)  # refused before a run exists
        run_id = new_run_id()
        owner = caller_identity()
        runs.start(owner, run_id, self._stream(request, remaining, run_id))
        async for message in runs.follow(run_id, owner, 0):
            yield message

    def _background_runs(self) -> BackgroundRuns:
        if self._runs is None:
            raise FailedPrecondition("this server keeps no background runs (no session store)")
        return self._runs

    async def _run(
        self, request: agent_pb2.QuestionRequest, remaining: float | None
    ) -> AsyncIterator[AgentEvent]:
        if self._agent is None:
            raise NotImplementedError("this server has no agent configured")
        self._check_model(request.model)
        request_id = request.request_id or current_request_id() or str(uuid.uuid4())
        metadata = dict(request.metadata)
        if metadata:
            log.debug("run metadata", request_id=request_id, metadata=metadata)
        deadline = Deadline.after(
            None if remaining is None else max(0.0, remaining - DEADLINE_MARGIN_S)
        )
        record = None
        if self._turns is not None:
            # A new session's turn begins beside the run (see service.api.turn_record).
            record = await TurnRecord.open(
                self._turns,
                session_id=request.session_id,
                owner=caller_identity(),
                question=request.query,
                request_id=request_id,
                metadata=metadata,
            )
        session_id = record.session_id if record else (request.session_id or str(uuid.uuid4()))
        agent_request = AgentRequest(
            query=request.query,
            max_results=request.max_results
            if request.HasField("max_results")
            else DEFAULT_MAX_RESULTS,
            threshold=(
                request.confidence_threshold if request.HasField("confidence_threshold") else None
            ),
            temperature=request.temperature if request.HasField("temperature") else None,
            filters=self._filters(request.filters),
            deadline=deadline,
            history=record.history if record else [],
            request_id=request_id,
            session_id=session_id,
            model=request.model or None,
            max_tokens=request.max_tokens if request.HasField("max_tokens") else None,
            instructions=request.instructions,
            metadata=metadata,
        )
        subscribers = Subscribers(self._listeners, self._agent.strategy)
        partial = PartialRun(
            request_id=request_id, session_id=session_id, strategy=self._agent.strategy
        )
        try:
            async for event in self._agent.run(agent_request):
                subscribers.event(event)
                partial.see(event)
                if isinstance(event, Completed):
                    # Now, not when the generator closes: Ask stops reading at Completed.
                    subscribers.ended(None)
                    if record is not None:
                        event = await record.complete(event)  # noqa: PLW2901 (stored before it is said)
                yield event
        except BaseException as error:
            subscribers.ended(error)
            if record is not None:
                await record.abort(error, partial)
            raise

    def _filters(self, message: Any) -> SearchFilters:
        """The request's filters, and what its caller may read: every search of the call
        (Retrieve's, each strategy's, each tool call's) carries both into the engine."""
        return replace(
            filters_from_proto(message),
            access=caller_access(unlabelled_public=self._unlabelled_public),
        )

    def _check_model(self, model: str) -> None:
        if not model or self._agent is None or self._agent.strategy == "extractive":
            return  # the configured model; the extractive strategy calls none
        if model not in self._allowed_models:
            allowed = ", ".join(sorted(self._allowed_models)) or "none"
            raise InvalidArgument(
                [
                    FieldViolation(
                        "model",
                        f"model {model[:64]!r} is not allowed on this server (allowed: "
                        f"{allowed[:100]})",
                        "model.not_allowed",
                    )
                ]
            )
