"""``ragagent eval --answers``: a question whose call fails is a scored failure, and the run
still ends with the report (it once aborted at the first DEADLINE_EXCEEDED, with no report)."""

from __future__ import annotations

from typing import Any

import grpc
from ragagent.v1 import agent_pb2, types_pb2

from service.commands.evaluate import ask_questions
from service.evaluation import EvalQuestion, evaluate

QUESTIONS = [
    EvalQuestion("slow", "What is URDF?", ("urdf.md",), ("links",)),
    EvalQuestion("fine", "What is ROS 2?", ("ros.md",), ("nodes",)),
]


class _Stub:
    async def Retrieve(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109 (gRPC stub shape)
        path = "urdf.md" if "URDF" in request.query else "ros.md"
        return agent_pb2.RetrieveResponse(
            sources=[types_pb2.SourceInfo(document_id=path, score=0.9)]
        )

    async def Ask(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109 (gRPC stub shape)
        if "URDF" in request.query:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details="Deadline Exceeded",
            )
        return agent_pb2.AgentResponse(
            answer="ROS 2 programs are nodes.", status=agent_pb2.RESPONSE_STATUS_SUCCESS
        )


async def test_a_failed_answer_is_a_scored_failure_in_the_report() -> None:
    retrieved, answers = await ask_questions(
        _Stub(),  # type: ignore[arg-type]
        QUESTIONS,
        k=5,
        threshold=0.3,
        with_answers=True,
    )
    report = evaluate(QUESTIONS, retrieved, k=5, threshold=0.3, answers=answers)

    assert report.failed == 1
    slow, fine = report.results
    assert slow.error.startswith("DEADLINE_EXCEEDED")
    assert slow.keywords_ok is False
    assert fine.keywords_ok is True
    assert report.keyword_accuracy == 0.5, "the failure counts against the score"
    table = report.render_table()
    assert "FAILED DEADLINE_EXCEEDED" in table
    assert "failed calls (scored as failures)  1" in table
