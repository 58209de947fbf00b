"""Background runs across processes: two `ragagent serve` replicas sharing PostgreSQL (and a
Qdrant stand-in: no Qdrant server binary exists here, the stand-in speaks its HTTP API to the
same client code), a client process killed with SIGKILL mid-answer, a resume on the other
replica, a cancel from the other replica, and a replica killed mid-run."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc, session_pb2, session_pb2_grpc

from tests.fleet.qdrant_standin import qdrant_standin
from tests.fleet.support import fleet, postgres_role
from tests.helpers import local_embedder
from tests.processes import REPO, ServerProcess, ingest_documents, model_process

LEASE_S = 3.0
QUESTION = "What does a URDF file describe?"
# A client of its own: starts a background run, prints each message's sequence and run id
# as it arrives, and is killed by the test mid-answer.
CLIENT = """
import sys, grpc
from ragagent.v1 import agent_pb2, agent_pb2_grpc
channel = grpc.insecure_channel(sys.argv[1])
stream = agent_pb2_grpc.AgentServiceStub(channel).AskStream(
    agent_pb2.QuestionRequest(query=sys.argv[2], background=True), timeout=120)
for message in stream:
    print(message.sequence, message.run_started.run_id, flush=True)
"""


@contextmanager
def _replicas(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    local_embedder()  # skips where the model is not provisioned
    with (
        qdrant_standin() as qdrant,
        postgres_role() as dsn,
        model_process(deltas=80, interval=0.05) as model,  # a 4 s answer
        fleet(
            tmp_path,
            2,
            qdrant_url=qdrant.url,
            database_url=dsn,
            qdrant_collection=f"fleet_{uuid.uuid4().hex[:8]}",
            llm_base_url=model.base_url,
            agent_strategy="retrieve_first",
            turn_lease=str(LEASE_S),
        ) as (first, second),
    ):
        ingest_documents(second.target)
        yield first, second


def _client_until(target: str, messages: int) -> tuple[str, int]:
    """Runs the client process until it has printed ``messages`` messages, then SIGKILLs it;
    returns the run id and the last sequence it saw."""
    process = subprocess.Popen(
        [sys.executable, "-c", CLIENT, target, QUESTION], cwd=REPO, stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    run_id, last = "", 0
    try:
        for _ in range(messages):
            sequence, _, named = process.stdout.readline().decode().strip().partition(" ")
            last = int(sequence)
            run_id = run_id or named
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    return run_id, last


def _resume(
    target: str, run_id: str, after: int
) -> tuple[list[agent_pb2.AskStreamResponse], float]:
    """The messages a resume receives, and when (monotonic) the last one arrived."""
    with grpc.insecure_channel(target) as channel:
        stream = agent_pb2_grpc.AgentServiceStub(channel).ResumeStream(
            agent_pb2.ResumeStreamRequest(run_id=run_id, after_sequence=after), timeout=60
        )
        messages = list(stream)
    return messages, time.monotonic()


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_killed_client_resumes_on_the_other_replica_with_exactly_the_missed_events(
    tmp_path: Path,
) -> None:
    with _replicas(tmp_path) as (first, second):
        run_id, seen = _client_until(first.target, messages=4)
        assert run_id.startswith("run_")
        # Two resumes at once: on the replica running it (in memory) and on the other
        # (polling the database); the final message's arrival tells what polling adds.
        results: dict[str, tuple[list[agent_pb2.AskStreamResponse], float]] = {}
        local = threading.Thread(
            target=lambda: results.__setitem__("local", _resume(first.target, run_id, seen))
        )
        local.start()
        remote, remote_done = _resume(second.target, run_id, seen)
        local.join(60)
        with grpc.insecure_channel(second.target) as channel:
            session_id = remote[-1].completed.session_id
            record = session_pb2_grpc.SessionServiceStub(channel).GetSession(
                session_pb2.GetSessionRequest(session_id=session_id), timeout=10
            )
    local_messages, local_done = results["local"]
    assert [m.sequence for m in remote] == list(range(seen + 1, seen + 1 + len(remote)))
    assert remote == local_messages
    final = remote[-1].completed
    assert final.status == agent_pb2.RESPONSE_STATUS_SUCCESS
    assert final.run_id == run_id
    assert record.session.turns[-1].status == session_pb2.RUN_STATUS_COMPLETED
    assert record.session.turns[-1].answer == final.answer
    print(
        f"background run: client killed after {seen} events; the other replica replayed "
        f"{len(remote)} more; its final message came {remote_done - local_done:+.3f} s after "
        "the running replica's"
    )


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_cancel_run_on_the_other_replica_stops_the_run(tmp_path: Path) -> None:
    with _replicas(tmp_path) as (first, second):
        run_id, _ = _client_until(first.target, messages=2)
        started = time.monotonic()
        with grpc.insecure_channel(second.target) as channel:
            response = agent_pb2_grpc.AgentServiceStub(channel).CancelRun(
                agent_pb2.CancelRunRequest(run_id=run_id), timeout=30
            )
        took = time.monotonic() - started
        assert response.status == agent_pb2.RESPONSE_STATUS_CANCELLED
        with pytest.raises(grpc.RpcError) as ended:
            _resume(second.target, run_id, 0)
        assert ended.value.code() is grpc.StatusCode.CANCELLED
    print(f"background run: CancelRun on the other replica returned after {took:.3f} s")


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_replica_killed_mid_run_leaves_the_run_recorded_lost(tmp_path: Path) -> None:
    with _replicas(tmp_path) as (doomed, survivor):
        run_id, _ = _client_until(doomed.target, messages=4)
        doomed.process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        doomed.process.wait(10)
        replayed: list[agent_pb2.AskStreamResponse] = []
        with grpc.insecure_channel(survivor.target) as channel:
            stream = agent_pb2_grpc.AgentServiceStub(channel).ResumeStream(
                agent_pb2.ResumeStreamRequest(run_id=run_id), timeout=60
            )
            with pytest.raises(grpc.RpcError) as lost:
                replayed.extend(stream)
        noticed = time.monotonic() - killed
    # What the dead replica had stored is replayed, in order, then the loss is said.
    assert [m.sequence for m in replayed] == list(range(1, len(replayed) + 1))
    assert lost.value.code() is grpc.StatusCode.ABORTED
    assert "stopped before the answer was complete" in (lost.value.details() or "")
    assert noticed < 3 * LEASE_S + 10
    print(f"background run: a resume learnt its replica died {noticed:.1f} s after the kill")
