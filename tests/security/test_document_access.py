"""Document permissions from the attacker's side, over the real server (API keys, the
embedded store, documents ingested through CorpusService with front matter labels).

Alice may only ``ask`` and is in group ``robotics``. The finance page is for group
``finance`` and holds a marker no one else may ever see. Whatever alice calls (Retrieve at
max_results 10, with filters aimed at the finance page, extractive and agentic answers
whose scripted model asks the tool for it, her own session afterwards), the marker and the
page's id never reach her, nor the model that answers her; she still gets k chunks where k
readable ones exist, and the admin sees everything.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from ragagent.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    corpus_pb2,
    corpus_pb2_grpc,
    session_pb2,
    session_pb2_grpc,
    types_pb2,
)

from service.api.readable import WITHHELD
from tests.fakes.openai_script import ChatReply, ToolCallScript
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import running_server
from tests.security.support import bearer, new_key

MARKER = "ZEBRA-7731"
FINANCE = "module-09-finance/chapter-01-pay/salaries.md"
FINANCE_PAGE = f"""---
title: Executive salaries
access:
  groups: [finance]
---

# Executive salaries

The executive salary budget for next year is {MARKER} thousand. Salaries of the board
members rise by twelve percent, and the salary budget is reviewed every quarter.

## Bonuses

Bonuses for executives are paid from the salary budget in March, code {MARKER}.
"""
ARMS = [
    (
        f"module-01-robots/chapter-0{i}-arms/arm-{i}.md",
        f"""---
title: Robot arm {i}
access:
  groups: [robotics]
---

# Robot arm {i}

Robot arm {i} has {i + 3} joints driven by servo motors, and its budget of joint torque
is planned per task. The controller reads the encoders of arm {i} a thousand times a second.
""",
    )
    for i in range(6)
]
QUESTION = "What is the executive salary budget for next year?"


def _ingest(
    channel: grpc.aio.Channel, key: str, docs: Sequence[tuple[str, str]], **opts: Any
) -> Any:
    async def messages() -> AsyncIterator[corpus_pb2.IngestDocumentsRequest]:
        yield corpus_pb2.IngestDocumentsRequest(options=corpus_pb2.IngestOptions(**opts))
        for path, content in docs:
            yield corpus_pb2.IngestDocumentsRequest(
                document=corpus_pb2.Document(path=path, content=content)
            )

    return corpus_pb2_grpc.CorpusServiceStub(channel).IngestDocuments(
        messages(), metadata=bearer(key), timeout=60
    )


class Keys:
    def __init__(self, folder: Path) -> None:
        self.file = folder / "keys.jsonl"
        self.admin = new_key(self.file, "root", "admin")[1]
        self.alice = self._key("alice", ["ask"], ["robotics"])
        self.reader = self._key("rita", ["corpus:read"], ["robotics"])
        self.writer = self._key("wes", ["corpus:write"], [])

    def _key(self, name: str, roles: list[str], groups: list[str]) -> str:
        from service.security.apikeys import create_key

        return create_key(self.file, name, roles, groups)[1]


def _leaks(messages: Sequence[Any]) -> list[str]:
    """What of the finance page appears anywhere in these messages."""
    found = []
    for message in messages:
        text = str(message)
        if MARKER in text or FINANCE in text:
            found.append(text[:200])
    return found


async def _setup(srv: Any, keys: Keys) -> None:
    done = await _ingest(srv.channel, keys.writer, [(FINANCE, FINANCE_PAGE), *ARMS])
    assert done.documents_added == 7


async def test_an_ask_caller_cannot_reach_another_groups_page_through_any_rpc(
    tmp_path: Path,
) -> None:
    keys = Keys(tmp_path)
    async with running_server(tmp_path / "data", api_keys_file=keys.file) as srv:
        await _setup(srv, keys)
        agent = agent_pb2_grpc.AgentServiceStub(srv.channel)
        corpus = corpus_pb2_grpc.CorpusServiceStub(srv.channel)
        seen: list[Any] = []
        aimed = [
            types_pb2.SearchFilters(),
            types_pb2.SearchFilters(module="module-09-finance"),
            types_pb2.SearchFilters(chapter="chapter-01-pay"),
        ]
        counts = []
        for filters in aimed:
            found = await agent.Retrieve(
                agent_pb2.RetrieveRequest(
                    query=QUESTION, max_results=10, confidence_threshold=0.0, filters=filters
                ),
                metadata=bearer(keys.alice),
            )
            seen.append(found)
            counts.append(len(found.sources))
        events = [
            e
            async for e in agent.AskStream(
                agent_pb2.QuestionRequest(query=QUESTION, max_results=10, confidence_threshold=0),
                metadata=bearer(keys.alice),
            )
        ]
        seen.extend(events)
        session_id = events[-1].completed.session_id
        mine = await session_pb2_grpc.SessionServiceStub(srv.channel).GetSession(
            session_pb2.GetSessionRequest(session_id=session_id), metadata=bearer(keys.alice)
        )
        seen.append(mine)
        listed = await corpus.ListDocuments(
            corpus_pb2.ListDocumentsRequest(), metadata=bearer(keys.reader)
        )
        stats = await corpus.GetCorpusStats(
            corpus_pb2.GetCorpusStatsRequest(), metadata=bearer(keys.reader)
        )
        seen.extend([listed, stats])
        admin = await agent.Retrieve(
            agent_pb2.RetrieveRequest(query=QUESTION, max_results=3, confidence_threshold=0.0),
            metadata=bearer(keys.admin),
        )
        everything = await corpus.ListDocuments(
            corpus_pb2.ListDocumentsRequest(), metadata=bearer(keys.admin)
        )
    assert _leaks(seen) == []
    # k readable chunks: all six robot pages (one chunk each) though finance's score higher.
    assert counts == [6, 0, 0]
    assert {s.document_id for s in seen[0].sources} == {path for path, _ in ARMS}
    assert {d.document_id for d in listed.documents} == {path for path, _ in ARMS}
    assert listed.documents[0].access.groups == ["robotics"]
    assert stats.document_count == 6
    assert admin.sources[0].document_id == FINANCE
    assert len(everything.documents) == 7


@pytest.mark.parametrize("strategy", ["agentic", "agents_sdk"])
async def test_the_agentic_tool_never_hands_the_model_another_groups_page(
    tmp_path: Path, fake_llm: FakeOpenAI, strategy: str
) -> None:
    keys = Keys(tmp_path)
    fake_llm.script_chat(
        ChatReply.calls(
            ToolCallScript(
                "qdrant_retrieval",
                json.dumps({"query": "executive salary budget bonuses", "top_k": 10}),
            ),
            ToolCallScript("qdrant_retrieval", json.dumps({"query": "salaries.md bonuses"})),
        ),
        ChatReply.text("Robot arms have joints [1]."),
    )
    async with running_server(
        tmp_path / "data",
        api_keys_file=keys.file,
        llm_base_url=fake_llm.base_url,
        agent_strategy=strategy,
        confidence_threshold=0.0,
    ) as srv:
        await _setup(srv, keys)
        agent = agent_pb2_grpc.AgentServiceStub(srv.channel)
        events = [
            e
            async for e in agent.AskStream(
                agent_pb2.QuestionRequest(query=QUESTION, max_results=10),
                metadata=bearer(keys.alice),
            )
        ]
    final = events[-1].completed
    assert final.status == agent_pb2.RESPONSE_STATUS_SUCCESS
    assert {s.document_id for s in final.sources} <= {path for path, _ in ARMS}
    assert final.sources, "the robot pages are readable and were found"
    assert _leaks(events) == []
    # The model saw the question, and tool results made of robot pages only.
    bodies = [json.dumps(r.body) for r in fake_llm.chat_requests]
    assert len(bodies) >= 2
    assert not [b for b in bodies if MARKER in b or FINANCE in b]
    assert "Robot arm" in bodies[-1]
    assert not [b for b in bodies if "Executive salaries" in b]


async def test_a_sessions_sources_are_checked_again_when_it_is_read(tmp_path: Path) -> None:
    keys = Keys(tmp_path)
    async with running_server(tmp_path / "data", api_keys_file=keys.file) as srv:
        await _setup(srv, keys)
        agent = agent_pb2_grpc.AgentServiceStub(srv.channel)
        sessions = session_pb2_grpc.SessionServiceStub(srv.channel)
        asked = await agent.Ask(
            agent_pb2.QuestionRequest(query="How many joints does robot arm 2 have?"),
            metadata=bearer(keys.alice),
        )
        cited = {s.document_id for s in asked.sources if s.citation}
        assert cited, asked.answer
        # Every cited page moves to finance: a metadata-only ingest of the same text.
        moved = [(p, c.replace("[robotics]", "[finance]")) for p, c in ARMS if p in cited]
        relabel = await _ingest(srv.channel, keys.writer, moved)
        after = await sessions.GetSession(
            session_pb2.GetSessionRequest(session_id=asked.session_id),
            metadata=bearer(keys.alice),
        )
        admin_view = await sessions.GetSession(
            session_pb2.GetSessionRequest(session_id=asked.session_id),
            metadata=bearer(keys.admin),
        )
    assert relabel.documents_relabelled == len(moved)
    assert relabel.chunks_written == 0
    turn = after.session.turns[0]
    assert not {s.document_id for s in turn.sources} & cited
    assert turn.answer == WITHHELD
    assert admin_view.session.turns[0].answer == asked.answer


@pytest.mark.parametrize("setting", ["admin", "public"])
async def test_unlabelled_pages_follow_the_setting_and_options_label_a_whole_stream(
    tmp_path: Path, setting: str
) -> None:
    keys = Keys(tmp_path)
    page = "# Lunch\n\nThe canteen serves lunch from noon, soup and bread every day.\n"
    async with running_server(
        tmp_path / "data", api_keys_file=keys.file, access_unlabelled=setting
    ) as srv:
        plain = await _ingest(srv.channel, keys.writer, [("canteen.md", page)])
        labelled = await _ingest(
            srv.channel,
            keys.writer,
            [("canteen-robots.md", page.replace("Lunch", "Robot lunch"))],
            access=corpus_pb2.DocumentAccess(groups=["robotics"]),
        )
        found = await agent_pb2_grpc.AgentServiceStub(srv.channel).Retrieve(
            agent_pb2.RetrieveRequest(query="When is lunch served?", confidence_threshold=0.0),
            metadata=bearer(keys.alice),
        )
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await _ingest(
                srv.channel,
                keys.writer,
                [("x.md", page)],
                access=corpus_pb2.DocumentAccess(groups=["a\x01b"]),
            )
    assert plain.documents_added == 1
    assert labelled.documents_added == 1
    readable = {"canteen-robots.md"} | ({"canteen.md"} if setting == "public" else set())
    assert {s.document_id for s in found.sources} == readable
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_without_authentication_every_caller_reads_everything(tmp_path: Path) -> None:
    async with running_server(tmp_path / "data") as srv:
        await _ingest_anonymous(srv.channel, [(FINANCE, FINANCE_PAGE), *ARMS])
        found = await agent_pb2_grpc.AgentServiceStub(srv.channel).Retrieve(
            agent_pb2.RetrieveRequest(query=QUESTION, max_results=3, confidence_threshold=0.0),
            metadata=(("x-user-id", "anyone"),),
        )
    assert found.sources[0].document_id == FINANCE


async def _ingest_anonymous(channel: grpc.aio.Channel, docs: Sequence[tuple[str, str]]) -> None:
    async def messages() -> AsyncIterator[corpus_pb2.IngestDocumentsRequest]:
        for path, content in docs:
            yield corpus_pb2.IngestDocumentsRequest(
                document=corpus_pb2.Document(path=path, content=content)
            )

    await corpus_pb2_grpc.CorpusServiceStub(channel).IngestDocuments(messages(), timeout=60)


async def test_the_ingest_command_grants_a_folder_to_groups_locally_and_remotely(
    tmp_path: Path,
) -> None:
    from service.config import Settings
    from tests.commands.support import run

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "canteen.md").write_text("# Lunch\n\nThe canteen serves soup from noon.\n")
    local = Settings(data_dir=tmp_path / "local")  # type: ignore[call-arg]
    bad = await run(local, "ingest", str(docs), "--group", "a\x01b", "--json")
    done = await run(local, "ingest", str(docs), "--group", "robotics", "--json")
    relabelled = await run(local, "ingest", str(docs), "--group", "finance", "--json")
    keys = Keys(tmp_path)
    async with running_server(tmp_path / "data", api_keys_file=keys.file) as srv:
        remote = await run(
            srv.settings, "ingest", str(docs), "--address", srv.target, "--group", "robotics",
            "--api-key", keys.writer, "--json",
        )  # fmt: skip
        listed = await corpus_pb2_grpc.CorpusServiceStub(srv.channel).ListDocuments(
            corpus_pb2.ListDocumentsRequest(), metadata=bearer(keys.reader)
        )
    assert bad.code == 2
    assert "--group/--principal" in bad.err
    assert done.json()["added"] == 1
    assert relabelled.json()["relabelled"] == 1
    assert relabelled.json()["chunks_written"] == 0
    assert remote.json()["added"] == 1
    assert [d.document_id for d in listed.documents] == ["canteen.md"]
    assert list(listed.documents[0].access.groups) == ["robotics"]


@pytest.mark.slow
async def test_a_server_process_with_keys_made_by_the_cli_filters_by_their_groups(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    from tests.processes import REPO, clean_env, server_process

    keys = tmp_path / "keys.jsonl"

    def cli_key(principal: str, role: str, *groups: str) -> str:
        flags = [arg for g in groups for arg in ("--group", g)]
        made = subprocess.run(
            [sys.executable, "-m", "service.cli", "keys", "create", "--principal", principal,
             "--role", role, *flags, "--file", str(keys)],
            env=clean_env(), cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        return made.stdout.strip().splitlines()[-1]

    writer = cli_key("wes", "corpus:write")
    alice = cli_key("alice", "ask", "robotics")
    admin = cli_key("root", "admin")
    with server_process(tmp_path / "server", api_keys_file=str(keys)) as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            await _ingest(channel, writer, [(FINANCE, FINANCE_PAGE), *ARMS])
            agent = agent_pb2_grpc.AgentServiceStub(channel)
            results = {}
            for who, key, filters in (
                ("alice", alice, types_pb2.SearchFilters()),
                ("alice aimed", alice, types_pb2.SearchFilters(chapter="chapter-01-pay")),
                ("admin", admin, types_pb2.SearchFilters()),
            ):
                found = await agent.Retrieve(
                    agent_pb2.RetrieveRequest(
                        query=QUESTION, max_results=10, confidence_threshold=0.0, filters=filters
                    ),
                    metadata=bearer(key),
                    timeout=30,
                )
                results[who] = [s.document_id for s in found.sources]
    assert sorted(results["alice"]) == sorted(path for path, _ in ARMS)
    assert results["alice aimed"] == []
    assert results["admin"][0] == FINANCE
    assert "groups robotics" in _keys_listed(keys)


def _keys_listed(keys: Path) -> str:
    import subprocess
    import sys

    from tests.processes import REPO, clean_env

    return subprocess.run(
        [sys.executable, "-m", "service.cli", "keys", "list", "--file", str(keys)],
        env=clean_env(), cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
