"""The Agent: runs one strategy per request and streams what happens as events.

The strategy runs in a task of its own that puts events in a small queue
(:class:`~service.agent.relay.Relay`); :meth:`Agent.run` hands them on and, whenever the
queue stays silent for a heartbeat interval, says that the run is still alive. That task
is owned by the generator: however the consumer stops reading (end of stream,
``aclose()``, cancellation), it is cancelled and awaited before the generator ends, which
closes the model's HTTP stream with it.

A generative run never succeeds with an empty answer, and a model answer that broke off is
never passed off as finished: both end the run with status ERROR and the text so far (see
:class:`~service.agent.events.Completed`), as does any other failure once the run started
(a failing model or store, a bug), and a run the server stops on shutdown
(:meth:`Agent.stop_runs`) ends the same way with status CANCELLED. None is retried here:
the caller has seen the partial text stream, and only the caller can decide to ask again.

Each request may choose its model (from the operator's allow-list, checked before the
request gets here), its answer's token limit and an addendum to the system prompt
(:class:`~service.agent.run.AgentRequest`); the extractive strategy calls no chat model
and ignores all three.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import cast

from service.agent.agentic import run_agentic
from service.agent.config import AgentConfig, StrategyName
from service.agent.events import AgentEvent, AnswerDelta, Completed, Heartbeat, RunStarted
from service.agent.extractive import run_extractive
from service.agent.latency import EndpointLatency, fitting
from service.agent.model import ChatModel
from service.agent.relay import ENDED, Relay, Signal
from service.agent.retrieve_first import run_retrieve_first
from service.agent.run import AgentRequest, Outcome, Run
from service.agent.sdk import load_agents_sdk
from service.agent.sentence_vectors import SentenceVectors
from service.domain import AnswerMode, Deadline, ResponseStatus, ToolCallStatus
from service.errors import (
    ConfigurationError,
    DeadlineExceeded,
    ModelEmptyAnswer,
    ModelStalled,
    RagAgentError,
    ShuttingDown,
)
from service.observability.logging import get_logger
from service.retrieval.base import Embedder, Retriever

log = get_logger("ragagent.agent")

# A deadline this close is as good as gone: the timer that fired may run a hair early.
_DEADLINE_SLACK_S = 0.05


def _with_queued(delta: AnswerDelta, relay: Relay[AgentEvent | _Failure]) -> AnswerDelta:
    """The delta with the deltas queued right behind it, as one.

    Deltas queue while the caller's stream is busy sending (the model wrote faster than the
    stream sends, or the server is loaded): they go as one message instead of one per model
    chunk, since each message costs the same CPU through the servicer, the interceptor
    chain and grpc whatever its length. The first delta is never held back (it is sent as
    soon as the stream can), the text is the same, and a citation or tool event stays
    after the text it followed.
    """
    queued = relay.take_while(_is_delta)
    if not queued:
        return delta
    return AnswerDelta(delta.text + "".join(cast(AnswerDelta, more).text for more in queued))


def _is_delta(item: object) -> bool:
    return type(item) is AnswerDelta


@dataclass(frozen=True, slots=True)
class _Failure:
    error: Exception


class Agent:
    """Answers questions with the configured strategy.

    ``model`` is required by the agentic and retrieve_first strategies, ``embedder`` by
    the extractive one; ``strategy`` overrides ``config.strategy`` (and is never downgraded).
    """

    def __init__(
        self,
        config: AgentConfig,
        *,
        retriever: Retriever,
        model: ChatModel | None = None,
        embedder: Embedder | None = None,
        strategy: StrategyName | None = None,
        system_prompt: str | None = None,
        consistent_limit: int = 0,
    ) -> None:
        """``system_prompt``: the opening of every system prompt (the operator's
        RAGAGENT_SYSTEM_PROMPT_FILE, read by the composition root); None: the built-in one.
        ``consistent_limit``: the retriever's results for limits up to this are prefixes of
        each other (SearchPipeline.consistent_limit), so a run's smaller repeated search is
        answered from its larger one; 0: every limit is searched."""
        self._strategy: StrategyName = strategy or config.strategy
        # Only a server left to choose (auto) may answer a short deadline with a faster
        # strategy; an explicit one always runs as configured.
        self._auto = strategy is None and config.auto
        self._latency = EndpointLatency()
        if self._strategy != "extractive" and model is None:
            raise ConfigurationError(f"the {self._strategy} strategy needs a chat model")
        if self._strategy == "extractive" and embedder is None:
            raise ConfigurationError("the extractive strategy needs an embedder")
        self._retriever = retriever
        self._consistent_limit = consistent_limit
        self._model = model
        # One per agent: the vectors of pieces it has ranked are remembered across runs.
        self._sentence_vectors = SentenceVectors(embedder) if embedder is not None else None
        self._threshold = config.confidence_threshold
        self._temperature = config.temperature
        self._max_tool_rounds = config.max_tool_rounds
        self._heartbeat_interval = config.heartbeat_interval
        self._sentences = config.extractive_sentences
        # Imported only when selected: the SDK is an optional extra.
        self._sdk = (
            load_agents_sdk(tracing=config.agents_sdk_tracing)
            if self._strategy == "agents_sdk"
            else None
        )
        self._opening = system_prompt
        # Runs in progress, for stop_runs(); each removes itself when it ends.
        self._active: set[tuple[Run, asyncio.Task[None]]] = set()
        self._candidates = config.extractive_candidates

    @property
    def strategy(self) -> StrategyName:
        return self._strategy

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentEvent]:
        """RunStarted, tool calls, answer deltas and Completed, with heartbeats between.

        A run that fails or is stopped still ends with Completed, carrying its error (see
        :class:`~service.agent.events.Completed`); an error is raised only when not even
        that final event could be made.
        """
        relay: Relay[AgentEvent | _Failure] = Relay(self._heartbeat_interval)
        strategy, downgraded = self._strategy_for(request)
        run = Run(
            request,
            retriever=self._retriever,
            threshold=self._threshold if request.threshold is None else request.threshold,
            emit=relay.put,
            strategy=strategy,
            answer_mode=(
                AnswerMode.EXTRACTIVE if strategy == "extractive" else AnswerMode.GENERATIVE
            ),
            opening=self._opening,
            latency=self._latency,
            downgraded_reason=downgraded,
            consistent_limit=self._consistent_limit,
        )
        producer: asyncio.Task[None] | None = None
        active: tuple[Run, asyncio.Task[None]] | None = None
        try:
            yield RunStarted(request.request_id, request.session_id, run.created_at)
            producer = asyncio.create_task(
                self._produce(run, relay), name=f"agent-run-{request.request_id}"
            )
            relay.watch(producer)
            active = (run, producer)
            self._active.add(active)
            while True:
                item = await relay.get()
                if isinstance(item, Signal):
                    if item is ENDED:
                        producer.result()  # re-raises whatever ended it unannounced
                        raise RuntimeError("the agent run ended without a result")
                    yield Heartbeat(run.elapsed(), run.phase)
                    continue
                if isinstance(item, _Failure):
                    raise item.error
                if type(item) is AnswerDelta:
                    item = _with_queued(item, relay)
                yield item
                if isinstance(item, Completed):
                    return
        finally:
            relay.close()
            if active is not None:
                self._active.discard(active)
            if producer is not None:
                producer.cancel()
                await asyncio.wait({producer})
                if not producer.cancelled():
                    producer.exception()  # seen through the relay already; mark it retrieved

    def _strategy_for(self, request: AgentRequest) -> tuple[StrategyName, str]:
        """The strategy this request runs, and why it is not the server's ("": it is)."""
        if not self._auto or self._model is None or self._strategy == "extractive":
            return self._strategy, ""
        name = self._model.configured(model=request.model).name
        downgrade = fitting(
            self._strategy,
            request.deadline.remaining(),
            self._latency,
            name,
            extractive=self._sentence_vectors is not None,
        )
        if downgrade is None:
            return self._strategy, ""
        log.info("strategy downgraded for the deadline", reason=downgrade.reason)
        return cast(StrategyName, downgrade.strategy), downgrade.reason

    def stop_runs(self) -> int:
        """Stops every run in progress (the server is shutting down): each ends with a final
        Completed of status CANCELLED, its answer so far, and ShuttingDown. Returns how many."""
        stopped = 0
        for run, producer in list(self._active):
            if not run.ended and not producer.done():
                run.stopped = True
                producer.cancel()
                stopped += 1
        return stopped

    async def _produce(self, run: Run, queue: Relay[AgentEvent | _Failure]) -> None:
        final = await self._final(run)
        run.ended = True  # from here on, stop_runs() leaves it alone
        await queue.put(final)

    async def _final(self, run: Run) -> Completed | _Failure:
        """Runs the strategy; the run's last event, whatever ended it."""
        try:
            outcome = await self._run_strategy(run)
            _check_answer(run, outcome)
        except asyncio.CancelledError:
            if not run.stopped:
                raise  # the consumer went away: nobody to tell
            # Stopped by the server: handled, the run ends with a final message.
            current = asyncio.current_task()
            if current is not None and current.uncancel() > 0:
                raise  # the consumer went away as well: nobody to tell
            stop = ShuttingDown("the server is shutting down; ask again (another replica)")
            return await self._ended(run, ResponseStatus.CANCELLED, "cancelled", stop)
        except DeadlineExceeded as exc:
            if isinstance(exc, ModelStalled) or not _ran_out(run.deadline):
                return await self._ended(run, ResponseStatus.ERROR, "error", exc)
            # Out of time: what was produced so far is the answer.
            await run.time_out_open_calls()
            await run.end_answer()
            outcome = Outcome(ResponseStatus.TIMEOUT, "timeout")
        except Exception as exc:  # noqa: BLE001 (reported after the final message)
            # A model answer that broke off, a failing model or store, a bug: the caller
            # keeps what streamed, marked as not an answer.
            return await self._ended(run, ResponseStatus.ERROR, "error", exc)
        return Completed(run.result(outcome))

    async def _ended(
        self, run: Run, status: ResponseStatus, reason: str, error: Exception
    ) -> Completed | _Failure:
        """The final message of a run that failed or was stopped, with what it produced."""
        why = error.message if isinstance(error, RagAgentError) else type(error).__name__
        try:
            await run.calls.end_open(ToolCallStatus.ERROR, f"the run ended first: {why}")
            await run.end_answer()
            return Completed(run.result(Outcome(status, reason)), error=error)
        except Exception:  # noqa: BLE001 (the error that ended the run is the one to report)
            return _Failure(error)

    async def _run_strategy(self, run: Run) -> Outcome:
        temperature = run.request.temperature
        if temperature is None:
            temperature = self._temperature
        strategy = run.strategy  # the server's, or a faster one for the deadline
        if strategy == "extractive":
            assert self._sentence_vectors is not None  # checked in __init__ / _strategy_for
            return await run_extractive(
                run, self._sentence_vectors, sentences=self._sentences, embedded=self._candidates
            )
        assert self._model is not None  # checked in __init__
        model = self._model.configured(model=run.request.model, max_tokens=run.request.max_tokens)
        if strategy == "retrieve_first":
            return await run_retrieve_first(run, model, temperature=temperature)
        if self._sdk is not None and strategy == "agents_sdk":
            return await self._sdk.run(
                run, model, temperature=temperature, max_tool_rounds=self._max_tool_rounds
            )
        return await run_agentic(
            run, model, temperature=temperature, max_tool_rounds=self._max_tool_rounds
        )


def _check_answer(run: Run, outcome: Outcome) -> None:
    """Raises ModelEmptyAnswer for a generative success without a word of answer."""
    if (
        outcome.status is ResponseStatus.SUCCESS
        and run.answer_mode is AnswerMode.GENERATIVE
        and not run.answer.strip()
    ):
        hint = ""
        if outcome.finish_reason == "length":  # a reasoning model can spend it all thinking
            hint = ": its token limit ran out first (RAGAGENT_LLM_MAX_TOKENS)"
        raise ModelEmptyAnswer(
            f"the model ended its answer (finish reason {outcome.finish_reason!r}) without "
            f"writing any text{hint}"
        )


def _ran_out(deadline: Deadline) -> bool:
    left = deadline.remaining()
    return left is not None and left < _DEADLINE_SLACK_S
