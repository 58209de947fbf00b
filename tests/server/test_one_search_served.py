"""The agentic run searches for the question itself, then the model usually asks the tool
for the same question with a smaller top_k: served by the composition root's pipeline (whose
results for up to 5 are prefixes of each other), that is one engine query, not two."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc, types_pb2

from tests.contract.streams import check_stream
from tests.fakes.openai_script import ChatReply, ToolCallScript
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import BOOKLET, running_server

QUESTION = "What does a URDF file describe?"


def counted(nearest: Callable[..., Coroutine[Any, Any, Any]], calls: list[int]) -> Any:
    async def nearest_counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["limit"])
        return await nearest(*args, **kwargs)

    return nearest_counted


@pytest.mark.parametrize("strategy", ["agentic", "agents_sdk"])
async def test_the_models_smaller_search_for_the_question_is_the_runs_first_hits(
    tmp_path: Path, fake_llm: FakeOpenAI, strategy: str
) -> None:
    fake_llm.script_chat(
        ChatReply.calls(
            ToolCallScript("qdrant_retrieval", json.dumps({"query": QUESTION, "top_k": 2}))
        ),
        ChatReply.text("A URDF file describes a robot [1].", pieces=3),
    )
    engine_queries: list[int] = []
    async with running_server(
        tmp_path, llm_base_url=fake_llm.base_url, agent_strategy=strategy, documents=BOOKLET
    ) as srv:
        store = srv.runtime.store
        store.nearest = counted(store.nearest, engine_queries)  # type: ignore[method-assign]
        call = agent_pb2_grpc.AgentServiceStub(srv.channel).AskStream(
            agent_pb2.QuestionRequest(query=QUESTION, max_results=5, confidence_threshold=0.0),
            timeout=30,
        )
        events = [event async for event in call]
    check_stream(events)
    final = events[-1].completed
    assert final.status == agent_pb2.RESPONSE_STATUS_SUCCESS
    assert len(engine_queries) == 1  # the run's own search; the model's is answered from it
    service, model = final.tool_calls
    assert service.id.startswith("srv_")
    assert not model.id.startswith("srv_")
    assert model.status == types_pb2.TOOL_CALL_STATUS_COMPLETED
    ran = [s["chunk_id"] for s in service.result["sources"]]
    got = [s["chunk_id"] for s in model.result["sources"]]
    assert len(ran) == len(BOOKLET)  # every passage passes a threshold of 0
    assert got == ran[:2]
