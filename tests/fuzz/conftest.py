"""One real server per fuzz module: a subprocess on embedded defaults with a small corpus.

One per module rather than per example: starting a server (loading the embedding model)
costs seconds, and a server that has already answered thousands of odd requests is the
more interesting target anyway. Every example checks that it is still alive.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from ragagent.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    corpus_pb2,
    corpus_pb2_grpc,
    session_pb2,
    session_pb2_grpc,
)

from service.config import default_model_dir
from tests.processes import SMALL_CORPUS, ServerProcess, ingest_documents, start_server


@dataclass
class FuzzTarget:
    server: ServerProcess
    channel: grpc.Channel
    # Ids and tokens the server issued, mixed into generated strings so that some requests
    # name things that exist: a session, its documents, the next page of each listing.
    known: tuple[str, ...]


def _issued_ids(channel: grpc.Channel) -> tuple[str, ...]:
    answer = agent_pb2_grpc.AgentServiceStub(channel).Ask(
        agent_pb2.QuestionRequest(query="What does a URDF file describe?"), timeout=60
    )
    documents = corpus_pb2_grpc.CorpusServiceStub(channel).ListDocuments(
        corpus_pb2.ListDocumentsRequest(page_size=1), timeout=30
    )
    sessions = session_pb2_grpc.SessionServiceStub(channel).ListSessions(
        session_pb2.ListSessionsRequest(page_size=1), timeout=30
    )
    return (
        answer.session_id,
        documents.next_page_token,
        sessions.next_page_token,
        *SMALL_CORPUS,
    )


def model_provisioned() -> bool:
    return (default_model_dir() / "model.onnx").is_file()


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzTarget]:
    if not model_provisioned():
        pytest.skip("embedding model not provisioned: run `make setup`")
    server = start_server(
        tmp_path_factory.mktemp("fuzz-server"),
        agent_strategy="extractive",
        log_format="json",
        log_level="WARNING",
        # One ONNX thread: the fuzzer shares two cores with the server.
        embedding_threads="1",
    )
    try:
        ingest_documents(server.target)
        # Responses are small, but requests reach past the server's 8 MiB limit on purpose.
        with grpc.insecure_channel(
            server.target, options=[("grpc.max_send_message_length", -1)]
        ) as channel:
            yield FuzzTarget(server, channel, _issued_ids(channel))
    finally:
        code = server.stop()
        # A crash during the module is reported by its last test; this is the clean exit.
        if code != 0 and code is not None:
            print(f"fuzz server exit code {code}:\n{server.log_tail()}")
