"""A replica killed with SIGKILL in the middle of a turn: its session answers on another
replica once the turn's lease (RAGAGENT_TURN_LEASE) runs out, and the dead turn is recorded
as ERROR, saying why."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc, session_pb2, session_pb2_grpc

from tests.fleet.qdrant_standin import qdrant_standin
from tests.fleet.support import fleet, postgres_role
from tests.helpers import local_embedder
from tests.processes import ingest_documents, model_process

LEASE_S = 3.0


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_session_answers_on_another_replica_within_the_lease_after_kill_9(
    tmp_path: Path,
) -> None:
    local_embedder()  # skips where the model is not provisioned
    collection = f"fleet_{uuid.uuid4().hex[:8]}"
    with (
        qdrant_standin() as qdrant,
        postgres_role() as dsn,
        model_process(deltas=100, interval=0.05) as model,  # a 5 s answer
        fleet(
            tmp_path,
            2,
            qdrant_url=qdrant.url,
            database_url=dsn,
            qdrant_collection=collection,
            llm_base_url=model.base_url,
            agent_strategy="retrieve_first",
            turn_lease=str(LEASE_S),
        ) as (doomed, survivor),
    ):
        ingest_documents(survivor.target)
        with grpc.insecure_channel(doomed.target) as channel:
            stream = agent_pb2_grpc.AgentServiceStub(channel).AskStream(
                agent_pb2.QuestionRequest(query="What does a URDF file describe?"), timeout=60
            )
            session_id = ""
            for event in stream:
                if event.HasField("run_started"):
                    session_id = event.run_started.session_id
                if event.HasField("answer_delta"):
                    break  # the turn is running on `doomed`
            doomed.process.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            doomed.process.wait(10)
        assert session_id
        with grpc.insecure_channel(survivor.target) as channel:
            agent = agent_pb2_grpc.AgentServiceStub(channel)
            refused: list[grpc.StatusCode] = []
            answer = None
            # The lease runs on wall-clock time in another process: polled, within a bound.
            while answer is None and time.monotonic() - killed < 3 * LEASE_S + 10:
                try:
                    answer = agent.Ask(
                        agent_pb2.QuestionRequest(query="And joints?", session_id=session_id),
                        timeout=60,
                    )
                except grpc.RpcError as error:
                    refused.append(error.code())
                    time.sleep(0.2)
            accepted_after = time.monotonic() - killed
            record = session_pb2_grpc.SessionServiceStub(channel).GetSession(
                session_pb2.GetSessionRequest(session_id=session_id), timeout=10
            )
    # Only SESSION_BUSY (ABORTED) while the dead turn's lease ran.
    assert set(refused) <= {grpc.StatusCode.ABORTED}
    assert answer is not None
    assert answer.session_id == session_id
    dead, second = record.session.turns
    assert dead.status == session_pb2.RUN_STATUS_ERROR
    assert "lease" in dead.error
    assert "RAGAGENT_TURN_LEASE" in dead.error
    assert second.status == session_pb2.RUN_STATUS_COMPLETED
    took = f"{accepted_after:.1f} s"
    print(f"kill -9: busy {len(refused)} times, answered on the other replica after {took}")
