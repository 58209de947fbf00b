"""RAGAGENT_RERANKER=http as production runs it: ``ragagent serve`` in a subprocess, a
scripted /rerank endpoint, Retrieve over gRPC; the endpoint's order (and scores, when the
operator says so) reach the client, and a failing endpoint falls back to the lexical order
with a WARNING and a count in ragagent_reranker_fallbacks_total."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from tests.processes import free_port, ingest_documents, server_process
from tests.retrieval.rerank_server import rerank_server

pytestmark = pytest.mark.timeout(300)


def retrieve(target: str, query: str) -> list[agent_pb2.SourceInfo]:
    with grpc.insecure_channel(target) as channel:
        reply = agent_pb2_grpc.AgentServiceStub(channel).Retrieve(
            agent_pb2.RetrieveRequest(query=query, max_results=3, confidence_threshold=0.0),
            timeout=30,
        )
    return list(reply.sources)


@pytest.mark.slow
def test_the_endpoint_orders_the_results_and_its_failure_is_counted(tmp_path: Path) -> None:
    metrics_port = free_port()
    with (
        rerank_server() as script,
        server_process(
            tmp_path,
            reranker="http",
            reranker_url=script.url,
            reranker_threshold_scores="true",
            metrics_address=f"127.0.0.1:{metrics_port}",
            log_format="json",
        ) as server,
    ):
        ingest_documents(server.target)
        query = "How do ROS 2 nodes exchange messages?"
        sources = retrieve(server.target, query)
        [sent] = script.requests
        assert sent["query"] == query
        documents = sent["documents"]
        # The scripted endpoint ranks the last document first, scoring i+1 / n+1.
        n = len(documents)
        assert [s.content for s in sources] == [d.split("\n\n", 1)[1] for d in documents[::-1]][:3]
        assert [round(s.score, 4) for s in sources] == [
            round((n - i) / (n + 1), 4) for i in range(3)
        ]

        script.mode = "status"
        fallback = retrieve(server.target, query)
        assert len(fallback) == 3
        assert all(0 <= s.score <= 1 for s in fallback)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            exposition = r.read().decode()
        assert 'ragagent_reranker_fallbacks_total{reason="status"} 1.0' in exposition
        assert "the reranker endpoint failed" in server.log()
