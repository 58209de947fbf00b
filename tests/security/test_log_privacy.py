"""Logs never carry question or answer text, keys or tokens, even at DEBUG.

A real server (API keys, a scripted model behind the real OpenAI client, sealed sessions)
answers every kind of call with a distinctive question and answer, including a model that
fails and is retried, a model error that quotes the prompt, and a wrong bearer token. Both
what structlog emits (its log capture) and everything written to stderr (the stdlib records
of grpc, httpx and openai go there) are searched for each secret.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog
from ragagent.v1 import agent_pb2, corpus_pb2, session_pb2
from structlog.testing import capture_logs

from service.observability.logging import configure_logging
from service.sessions.sealing import new_key as new_session_key
from tests.fakes.openai_script import ChatReply, ErrorReply, ToolCallScript
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import running_server
from tests.security.support import _agent, _corpus, _sessions, bearer, new_key

QUESTION = "Which quokka-velvet routine keeps my passport 5521 safe?"
SEARCH = "quokka-velvet passport routine"
ANSWER = "The quokka-velvet routine seals passport 5521 in the vault [1]."
# The corpus is not the caller's: no secret in it, so that a passage quoted is no false alarm.
DOCUMENT = "The vault routine is described here. It seals documents in a vault."
MODEL_KEY = "sk-model-key-do-not-log-8b1f"
WRONG_TOKEN = "wrong-token-do-not-log-77aa"


# SQLAlchemy at INFO is echo=True: statements, their parameters hidden by the store. Its
# DEBUG (echo="debug") prints result rows, the stored text itself; nothing enables it.
_LIBRARIES = {
    "openai": logging.DEBUG,
    "httpx": logging.DEBUG,
    "httpcore": logging.DEBUG,
    "grpc": logging.DEBUG,
    "sqlalchemy": logging.INFO,
}


@pytest.fixture
def debug_logging() -> Iterator[None]:
    """The service at DEBUG, and the libraries' own debug logging switched on too (as
    OPENAI_LOG=debug would for the model client): none of it may quote a secret."""
    configure_logging("DEBUG", "json")
    levels = {name: logging.getLogger(name).level for name in _LIBRARIES}
    for name, level in _LIBRARIES.items():
        logging.getLogger(name).setLevel(level)
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    structlog.reset_defaults()


async def _conversation(channel: grpc.aio.Channel, key: str) -> None:
    md = bearer(key)

    async def documents() -> AsyncIterator[corpus_pb2.IngestDocumentsRequest]:
        yield corpus_pb2.IngestDocumentsRequest(
            document=corpus_pb2.Document(path="vault/quokka.md", content=DOCUMENT)
        )

    await _corpus(channel).IngestDocuments(documents(), metadata=md, timeout=60)
    first = await _agent(channel).Ask(
        agent_pb2.QuestionRequest(query=QUESTION), metadata=md, timeout=60
    )
    assert ANSWER in first.answer
    stream = _agent(channel).AskStream(
        agent_pb2.QuestionRequest(query=QUESTION, session_id=first.session_id),
        metadata=md,
        timeout=60,
    )
    _ = [event async for event in stream]
    with pytest.raises(grpc.aio.AioRpcError):  # the model refuses, quoting the prompt
        await _agent(channel).Ask(
            agent_pb2.QuestionRequest(query=QUESTION, session_id=first.session_id),
            metadata=md,
            timeout=60,
        )
    sessions = _sessions(channel)
    got = await sessions.GetSession(
        session_pb2.GetSessionRequest(session_id=first.session_id), metadata=md, timeout=30
    )
    assert got.session.turns[0].question == QUESTION
    await sessions.ListSessions(session_pb2.ListSessionsRequest(), metadata=md, timeout=30)
    await sessions.DeleteSession(
        session_pb2.DeleteSessionRequest(session_id=first.session_id), metadata=md, timeout=30
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _agent(channel).Ask(
            agent_pb2.QuestionRequest(query=QUESTION), metadata=bearer(WRONG_TOKEN), timeout=30
        )
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("sealed", [False, True], ids=["plaintext-store", "sealed-store"])
async def test_no_log_line_carries_text_keys_or_tokens(
    sealed: bool,
    tmp_path: Path,
    fake_llm: FakeOpenAI,
    debug_logging: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keys = tmp_path / "keys.jsonl"
    _, api_key = new_key(keys, "alice", "ask", "corpus:write", "corpus:read")
    session_key = new_session_key()
    search = ToolCallScript("qdrant_retrieval", json.dumps({"query": SEARCH}))
    fake_llm.script_chat(
        # Ask: a search, then the answer after one retried server error.
        ChatReply.calls(search),
        ErrorReply(500, message=f"overloaded while reading: {QUESTION}"),
        ChatReply.text(ANSWER),
        # AskStream, continuing the session.
        ChatReply.calls(search),
        ChatReply.text(ANSWER),
        # Ask again: the endpoint rejects the request and quotes it back.
        ErrorReply(400, message=f"invalid request: {QUESTION} / {ANSWER}"),
    )
    with capture_logs() as events:
        async with running_server(
            tmp_path / "data",
            api_keys_file=keys,
            llm_base_url=fake_llm.base_url,
            llm_api_key=MODEL_KEY,
            llm_max_retries=2,
            agent_strategy="agentic",
            # Whatever the tiny corpus scores, the scripted answer is the one given.
            confidence_threshold=0.0,
            access_unlabelled="public",  # its unlabelled corpus is for every caller
            session_encryption_key=f"k1:{session_key}" if sealed else None,
            log_level="DEBUG",
        ) as server:
            await _conversation(server.channel, api_key)
    assert fake_llm.unused_replies == 0  # every scripted failure happened
    structured = json.dumps(events, default=str)
    written = capsys.readouterr().err
    assert '"rpc"' in structured  # the access log was captured
    assert "HTTP Request" in written  # and so were the libraries' records
    assert "INSERT INTO turns" in written
    secrets = {
        "question": QUESTION,
        "answer": ANSWER,
        "searched text": SEARCH,
        "api key": api_key,
        "model key": MODEL_KEY,
        "wrong token": WRONG_TOKEN,
        "session key": session_key,
        "distinctive word": "quokka-velvet",
    }
    leaks = {
        f"{name} in {where}"
        for name, secret in secrets.items()
        for where, text in (("structlog", structured), ("stderr", written))
        if secret in text
    }
    assert not leaks, _context(leaks, events, written)


def _context(leaks: set[str], events: list[dict[str, Any]], written: str) -> str:
    lines = [json.dumps(e, default=str) for e in events] + written.splitlines()
    hits = [line for line in lines if "quokka-velvet" in line]
    return f"{sorted(leaks)}\n" + "\n".join(hits[:20])
