"""Background runs: a run that outlives its call, whose stream any replica can replay.

A background run's stream messages come from a task this component owns, not from the
call: the caller that started it follows the messages in memory, and when it goes away the
run goes on. A second task per run writes the messages to the session database in batches
(:class:`~service.sessions.runs.RunLog`), renewing the run's lease with each write and
learning there whether a CancelRun (on any replica) asked to stop it. A resume follows
the run in memory when it runs here, and otherwise reads the database every
RAGAGENT_RUN_POLL_INTERVAL; either way it gets every message after the sequence it names,
then the live ones, then the stream's own end (the final message and the same status).

A run's end is written once every message before it is: a reader that sees the run ended
has all its messages. The server stops its background runs like its calls on shutdown
(see :meth:`BackgroundRuns.close`); a replica that dies leaves its runs to be marked lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field

import grpc
from ragagent.v1 import agent_pb2

from service.errors import RagAgentError, RunEnded, TooManyStreams
from service.observability.logging import get_logger
from service.sessions.runs import Event, RunLog

log = get_logger("ragagent.runs")

Messages = AsyncIterator[agent_pb2.AskStreamResponse]
Stream = AsyncGenerator[agent_pb2.AskStreamResponse, None]
_LOST = "the replica running it stopped before the answer was complete"
CANCELLED_BY_CALLER = "the run was cancelled (CancelRun)"
CANCELLED_BY_SHUTDOWN = "the server shut down before the answer was complete; ask again"
_STATUS = {
    agent_pb2.RESPONSE_STATUS_SUCCESS: "success",
    agent_pb2.RESPONSE_STATUS_NO_ANSWER: "no_answer",
    agent_pb2.RESPONSE_STATUS_ERROR: "error",
    agent_pb2.RESPONSE_STATUS_TIMEOUT: "timeout",
    agent_pb2.RESPONSE_STATUS_CANCELLED: "cancelled",
}
STATUS_PROTO = {name: value for value, name in _STATUS.items()}


def new_run_id() -> str:
    """192 random bits: the id is a name, never an authorisation (the owner is checked)."""
    return "run_" + secrets.token_urlsafe(24)


@dataclass(eq=False)
class LiveRun:
    """A run this replica runs: its messages so far, and how its stream ended."""

    run_id: str
    owner: str
    messages: list[agent_pb2.AskStreamResponse] = field(default_factory=list)
    done: bool = False
    error: BaseException | None = None
    stored: int = 0  # how many of ``messages`` are in the database
    stop_reason: str = ""  # why the run was stopped, when it was
    ending: bool = False  # its stream is over: its end is being written, nothing stops it
    closing: asyncio.Event = field(default_factory=asyncio.Event)  # the writer's last round
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def publish(self, message: agent_pb2.AskStreamResponse) -> None:
        self.messages.append(message)
        self._wake()

    def finish(self, error: BaseException | None) -> None:
        self.done, self.error = True, error
        self._wake()

    async def follow(self, after: int) -> Messages:
        """The messages after sequence ``after``, live, then the stream's end."""
        index = after  # message n has sequence n
        while True:
            while index < len(self.messages):
                index += 1
                yield self.messages[index - 1]
            if self.done:
                if self.error is not None:
                    raise self.error
                return
            await self._changed.wait()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


class BackgroundRuns:
    """Starts, follows and cancels background runs; owns their tasks."""

    def __init__(
        self,
        runs: RunLog,
        *,
        poll_interval_s: float,
        flush_interval_s: float = 0.05,
        max_per_principal: int = 16,
    ) -> None:
        self._log = runs
        self._poll_s = poll_interval_s
        self._flush_s = flush_interval_s
        self._max_per_principal = max_per_principal
        self._live: dict[str, LiveRun] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def keeps_content(self) -> bool:
        return self._log.keeps_content

    def start(self, owner: str, run_id: str, stream: Stream) -> LiveRun:
        """Runs ``stream`` (its first message must be ``run_started``) as a background run."""
        if sum(1 for run in self._live.values() if run.owner == owner) >= self._max_per_principal:
            raise TooManyStreams(
                f"this caller already has {self._max_per_principal} background runs going on "
                "this replica",
                retry_after_s=1.0,
            )
        run = self._live[run_id] = LiveRun(run_id, owner)
        task = asyncio.create_task(self._produce(run, stream), name=f"background-run {run_id}")
        self._tasks[run_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(run_id, None))
        return run

    async def follow(self, run_id: str, owner: str, after: int) -> Messages:
        """Every message of the owner's run after ``after``, then the live ones, then its end."""
        live = self._live.get(run_id)
        if live is not None and live.owner == owner:
            async for message in live.follow(after):
                yield message
            return
        async for message in self._follow_stored(run_id, owner, after):
            yield message

    async def cancel(self, run_id: str, owner: str) -> str:
        """Stops the owner's run and waits for its end; returns its final status."""
        live = self._live.get(run_id)
        task = self._tasks.get(run_id)
        if live is not None and live.owner == owner and task is not None:
            self._stop(live, CANCELLED_BY_CALLER)
            await asyncio.wait([task])
        else:
            await self._log.get(run_id, owner)  # NOT_FOUND before anything is written
            await self._log.request_cancel(run_id, owner)
        while True:
            stored = await self._log.get(run_id, owner)
            if not stored.running:
                return stored.status
            if self._log.is_stale(stored):
                await self._log.mark_lost(run_id, _LOST)
                continue
            await asyncio.sleep(self._poll_s)

    async def wait_idle(self) -> None:
        """Returns once no background run is going (for a graceful shutdown)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))

    async def close(self, wait_s: float) -> None:
        """Waits up to ``wait_s`` for the runs still going to end (the server has stopped
        the agent's runs, which then send their final message), then stops the rest and
        waits as long again for their ends to be written."""
        for stop in (False, True):
            if stop:
                for run in list(self._live.values()):
                    self._stop(run, CANCELLED_BY_SHUTDOWN)
            if self._tasks:
                await asyncio.wait(list(self._tasks.values()), timeout=wait_s)

    # --- internals -----------------------------------------------------------------

    def _stop(self, run: LiveRun, why: str) -> None:
        task = self._tasks.get(run.run_id)
        if task is not None and not task.done() and not run.ending:
            run.stop_reason = run.stop_reason or why
            task.cancel()

    async def _produce(self, run: LiveRun, stream: Stream) -> None:
        writer: asyncio.Task[None] | None = None
        error: BaseException | None = None
        try:
            async for message in stream:
                if message.HasField("run_started"):
                    await self._log.create(
                        run.run_id, owner=run.owner, session_id=message.run_started.session_id
                    )
                    writer = asyncio.create_task(self._write(run), name=f"run-writer {run.run_id}")
                run.publish(message)
        except asyncio.CancelledError:
            # Only _stop cancels this task (CancelRun, shutdown): a stop it handles by
            # ending the run, not a cancellation of anyone waiting on it.
            error = RunEnded(
                grpc.StatusCode.CANCELLED, "RUN_CANCELLED", run.stop_reason or CANCELLED_BY_CALLER
            )
        except Exception as failure:  # noqa: BLE001 (the stream's end, replayed to followers)
            error = failure
        finally:
            run.ending = True
            await stream.aclose()
        try:
            if writer is not None:
                # Not cancelled: a write it has begun commits anyway, and its events must
                # not be written twice. It ends after its current round.
                run.closing.set()
                await writer
                await self._end(run, error)
        except Exception as failure:  # noqa: BLE001 (a resume will find the run lost)
            log.warning(
                "could not record a background run's end", run_id=run.run_id, error=repr(failure)
            )
        finally:
            run.finish(error)
            self._live.pop(run.run_id, None)

    async def _write(self, run: LiveRun) -> None:
        """Writes new messages every flush interval, renews the lease at least every third
        of it, and stops the run when a cancel was asked for it on another replica."""
        renew_every = self._log.lease.total_seconds() / 3
        idle = 0.0
        while not run.closing.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._flush_s):
                    await run.closing.wait()
            if run.closing.is_set():
                return  # the run's end writes what is left
            idle += self._flush_s
            if run.stored == len(run.messages) and idle < renew_every:
                continue
            batch = _events(run, len(run.messages))
            try:
                cancel = await self._log.append(run.run_id, batch)
            except Exception as failure:  # noqa: BLE001 (tried again next round)
                log.warning(
                    "could not write a background run's events",
                    run_id=run.run_id,
                    error=repr(failure),
                )
                continue
            run.stored += len(batch)
            idle = 0.0
            if cancel:
                self._stop(run, CANCELLED_BY_CALLER)

    async def _end(self, run: LiveRun, error: BaseException | None) -> None:
        final = next((m for m in reversed(run.messages) if m.HasField("completed")), None)
        if final is None:
            # Stopped before the run's own end: followers still get a final message,
            # CANCELLED, with the answer produced so far.
            final = _cancelled(run)
            run.publish(final)
        code, reason, message = _end_of(error)
        await self._log.end(
            run.run_id,
            _events(run, len(run.messages)),
            status=_STATUS.get(final.completed.status, "error"),
            code=f"{code}:{reason}" if code else "",
            message=message,
        )

    async def _follow_stored(self, run_id: str, owner: str, after: int) -> Messages:
        last = after
        while True:
            stored = await self._log.get(run_id, owner)
            events = await self._log.events_after(run_id, last)
            for event in events:
                last = event.sequence
                yield agent_pb2.AskStreamResponse.FromString(event.payload)
            if events:
                continue  # a full page: more may be stored already
            if not stored.running:
                if last < stored.last_sequence:
                    continue
                if stored.end_code:
                    code, _, reason = stored.end_code.partition(":")
                    raise RunEnded(grpc.StatusCode[code], reason or code, stored.end_message)
                return
            if self._log.is_stale(stored) and await self._log.mark_lost(run_id, _LOST):
                continue
            await asyncio.sleep(self._poll_s)


def _events(run: LiveRun, upto: int) -> list[Event]:
    return [
        Event(message.sequence, message.SerializeToString())
        for message in run.messages[run.stored : upto]
    ]


def _cancelled(run: LiveRun) -> agent_pb2.AskStreamResponse:
    started = run.messages[0].run_started if run.messages else agent_pb2.RunStarted()
    deltas = (m.answer_delta.text for m in run.messages if m.HasField("answer_delta"))
    found = (m.sources_found.sources for m in run.messages if m.HasField("sources_found"))
    message = agent_pb2.AskStreamResponse(sequence=len(run.messages) + 1)
    message.completed.CopyFrom(
        agent_pb2.AgentResponse(
            request_id=started.request_id,
            session_id=started.session_id,
            answer="".join(deltas),
            sources=[source for sources in found for source in sources],
            status=agent_pb2.RESPONSE_STATUS_CANCELLED,
            finish_reason="cancelled",
            created_at=started.created_at,
            run_id=run.run_id,
        )
    )
    return message


def _end_of(error: BaseException | None) -> tuple[str, str, str]:
    if error is None:
        return "", "", ""
    if isinstance(error, RagAgentError):
        return error.code.name, error.reason, error.message
    return "INTERNAL", "INTERNAL", "internal error; the server log has the details"
