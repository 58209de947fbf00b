"""Data at rest: RAGAGENT_SESSION_ENCRYPTION_KEY seals a turn's text with AES-GCM on SQLite
and PostgreSQL alike, keys rotate, a missing key is refused at start-up and at read time,
and RAGAGENT_RECORD_CONTENT=false keeps the text out of the database altogether."""

from __future__ import annotations

import base64
import dataclasses
import sqlite3
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError

from service.config import Settings
from service.configs import session_store_config
from service.domain import ConversationTurn, ToolCallRecord, ToolCallStatus
from service.errors import ConfigurationError, DatabaseUnavailable
from service.sessions import SessionStore, open_session_store, schema, writes
from service.sessions.sealing import Cipher, Content, Undecryptable, new_key
from tests.sessions.support import START, Database, OpenStore, result

QUESTION = "What does the zebra-quartz protocol say about my tax id 4411?"
ANSWER = "The zebra-quartz protocol keeps tax id 4411 private [1]."
SECRETS = ("zebra-quartz", "tax id")  # not base64: ciphertext cannot contain them by chance
KEY_1, KEY_2 = f"k1:{new_key()}", f"k2:{new_key()}"


def sealed(*keys: str) -> Content:
    return Content(cipher=Cipher.parse(",".join(keys)))


def outcome(answer: str = ANSWER) -> Any:
    call = ToolCallRecord(
        id="call-1",
        name="qdrant_retrieval",
        arguments={"query": "zebra-quartz tax id 4411"},
        status=ToolCallStatus.ERROR,
        started_at=START,
        duration_s=0.1,
        result={"passages": ["zebra-quartz passage"]},
        error="zebra-quartz lookup failed",
    )
    return dataclasses.replace(result(answer), tool_calls=[call])


async def converse(store: SessionStore, turns: int = 1, session_id: str | None = None) -> str:
    for n in range(turns):
        handle = await store.begin_turn(
            session_id=session_id, owner="alice", question=f"{QUESTION} ({n})", request_id="r"
        )
        session_id = handle.session_id
        assert await store.complete_turn(handle.turn_id, outcome(f"{ANSWER} ({n})"))
    assert session_id is not None
    return session_id


async def raw_dump(database: Database) -> str:
    """Every text column of the turn tables, read past SQLAlchemy and the store."""
    queries = (
        "SELECT question, error FROM turns",
        "SELECT content, '' FROM messages",
        "SELECT CAST(arguments AS TEXT), CAST(result AS TEXT) FROM tool_calls",
        "SELECT error, '' FROM tool_calls",
    )
    if database.backend == "sqlite":
        path = database.url.split(":///", 1)[1]
        with sqlite3.connect(path) as connection:
            rows = [row for query in queries for row in connection.execute(query)]
    else:
        import asyncpg

        connection = await asyncpg.connect(
            database.url.replace("postgresql+asyncpg://", "postgresql://", 1),
            server_settings=database.connect_args["server_settings"],
        )
        try:
            rows = [tuple(row) for query in queries for row in await connection.fetch(query)]
        finally:
            await connection.close()
    return "\n".join(str(value) for row in rows for value in row)


async def test_sealed_text_round_trips_and_the_database_holds_only_ciphertext(
    database: Database, open_store: OpenStore
) -> None:
    store = await open_store(content=sealed(KEY_1))
    sid = await converse(store, turns=2)
    handle = await store.begin_turn(session_id=sid, owner="alice", question="third", request_id="r")
    assert handle.history == [
        ConversationTurn(f"{QUESTION} ({n})", f"{ANSWER} ({n})") for n in (0, 1)
    ]
    assert await store.abort_turn(handle.turn_id, "error", "zebra-quartz model failure")

    turns = (await store.get_session(sid, "alice")).turns
    assert [t.question for t in turns] == [f"{QUESTION} (0)", f"{QUESTION} (1)", "third"]
    assert turns[0].answer == f"{ANSWER} (0)"
    assert turns[2].error == "zebra-quartz model failure"
    [call] = turns[0].tool_calls
    assert call.arguments == {"query": "zebra-quartz tax id 4411"}
    assert call.result == {"passages": ["zebra-quartz passage"]}
    assert call.error == "zebra-quartz lookup failed"

    dump = await raw_dump(database)
    assert "enc:v1:k1:" in dump
    for secret in (*SECRETS, "third"):
        assert secret not in dump


async def test_rows_written_before_encryption_still_read(open_store: OpenStore) -> None:
    plain = await open_store()
    sid = await converse(plain)
    await plain.close()
    store = await open_store(content=sealed(KEY_1))
    sid = await converse(store, session_id=sid)  # a sealed turn after a plaintext one
    turns = (await store.get_session(sid, "alice")).turns
    assert [t.answer for t in turns] == [f"{ANSWER} (0)"] * 2
    assert turns[0].tool_calls[0].arguments == {"query": "zebra-quartz tax id 4411"}


async def test_keys_rotate_old_ones_open_new_ones_seal(
    database: Database, open_store: OpenStore
) -> None:
    old = await open_store(content=sealed(KEY_1))
    sid = await converse(old)
    await old.close()
    rotated = await open_store(content=sealed(KEY_2, KEY_1))
    await converse(rotated, session_id=sid)
    turns = (await rotated.get_session(sid, "alice")).turns
    assert [t.question for t in turns] == [f"{QUESTION} (0)"] * 2
    dump = await raw_dump(database)
    assert "enc:v1:k1:" in dump
    assert "enc:v1:k2:" in dump


@pytest.mark.parametrize(
    "keys",
    [(), (KEY_2,), (f"k1:{new_key()}",)],
    # Named, not spelled: a random key in a test's id differs between xdist workers.
    ids=["no key", "another key id", "the same id with another key"],
)
async def test_a_store_holding_text_it_cannot_open_is_refused(
    open_store: OpenStore, keys: tuple[str, ...]
) -> None:
    """No key, a key list without the store's key id: refused at start-up, naming the id.
    The same id with another key passes that check and fails at read time instead."""
    first = await open_store(content=sealed(KEY_1))
    sid = await converse(first)
    await first.close()
    content = sealed(*keys) if keys else Content()
    if keys and keys[0].startswith("k1:"):
        store = await open_store(content=content)
        with pytest.raises(DatabaseUnavailable, match="failed to open") as failure:
            await store.get_session(sid, "alice")
        assert isinstance(failure.value, Undecryptable)
        assert failure.value.reason == "DATABASE_UNAVAILABLE"
        return
    with pytest.raises(ConfigurationError, match="'k1'" if keys else "none is set"):
        await open_store(content=content)


async def test_an_unknown_key_id_met_while_running_fails_the_read(
    open_store: OpenStore,
) -> None:
    """Another replica sealing with a key this one lacks (a rollout in the wrong order)."""
    store = await open_store(content=sealed(KEY_1))
    newer = SessionStore(store.engine, ttl_s=1800.0, content=sealed(KEY_2))
    handle = await newer.begin_turn(
        session_id=None, owner="alice", question=QUESTION, request_id="r"
    )
    with pytest.raises(Undecryptable, match="key id 'k2'") as failure:
        await store.get_session(handle.session_id, "alice")
    assert failure.value.metadata["key_id"] == "k2"
    assert await newer.abort_turn(handle.turn_id, "cancelled")
    await newer._writes.close()  # shares the engine: the fixture disposes of it


async def test_ciphertext_moved_to_another_row_does_not_open(open_store: OpenStore) -> None:
    store = await open_store(content=sealed(KEY_1))
    first, second = await converse(store), await converse(store)
    turns = schema.turns
    async with store.engine.begin() as connection:
        source = (await store.get_session(first, "alice")).turns[0].turn_id
        stolen = (
            (await connection.execute(turns.select().where(turns.c.id == source))).one().question
        )
        await connection.execute(
            update(turns).where(turns.c.session_id == second).values(question=stolen)
        )
    with pytest.raises(Undecryptable, match="moved from another row"):
        await store.get_session(second, "alice")


async def test_without_recording_content_turns_keep_everything_but_their_text(
    database: Database, open_store: OpenStore
) -> None:
    store = await open_store(content=Content(record=False))
    sid = await converse(store, turns=2)
    handle = await store.begin_turn(session_id=sid, owner="alice", question="third", request_id="r")
    assert handle.history == []  # nothing to replay
    assert await store.abort_turn(handle.turn_id, "error", "zebra-quartz model failure")
    session = await store.get_session(sid, "alice")
    assert session.turn_count == 3
    first = session.turns[0]
    assert (first.question, first.answer, first.error) == ("", "", "")
    assert first.usage.prompt_tokens == 120
    assert first.timings is not None
    assert [s.hit.chunk.chunk_id for s in first.sources] == ["c-1"]
    [call] = first.tool_calls
    assert (call.name, call.status, call.arguments, call.result, call.error) == (
        "qdrant_retrieval",
        ToolCallStatus.ERROR,
        {},
        None,
        "",
    )
    dump = await raw_dump(database)
    for secret in (*SECRETS, "third"):
        assert secret not in dump


async def test_history_stops_at_a_turn_recorded_without_text(open_store: OpenStore) -> None:
    """Recording switched off and on again: the model never gets an empty exchange."""
    on = await open_store()
    sid = await converse(on)
    await on.close()
    off = await open_store(content=Content(record=False))
    await converse(off, session_id=sid)
    await off.close()
    again = await open_store()
    sid = await converse(again, session_id=sid)
    handle = await again.begin_turn(session_id=sid, owner="alice", question="q", request_id="r")
    assert handle.history == [ConversationTurn(f"{QUESTION} (0)", f"{ANSWER} (0)")]
    assert await again.abort_turn(handle.turn_id, "cancelled")


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("k1", "entry 1 must be KEY_ID:BASE64_KEY"),
        (f"k1:{new_key()},bad id:{new_key()}", "entry 2"),
        (f"k1:{new_key()},k1:{new_key()}", "listed twice"),
        ("k1:not base64!", "not base64"),
        (f"k1:{base64.b64encode(b'short').decode()}", "has 5 bytes"),
    ],
    ids=["no key", "a bad id", "an id twice", "not base64", "short"],
)
def test_a_malformed_key_setting_is_explained_without_the_key(setting: str, complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint) as failure:
        Content.from_key(record=True, key=setting)
    for entry in setting.split(","):
        secret = entry.partition(":")[2]
        assert not secret or secret not in str(failure.value)


def test_urlsafe_keys_and_spaces_are_accepted() -> None:
    key = base64.urlsafe_b64encode(bytes(range(200, 232))).decode()
    cipher = Cipher.parse(f" a:{key} , b:{new_key()} ")
    assert cipher.active == "a"
    assert cipher.open(cipher.seal("text", "t/question"), "t/question") == "text"


async def test_database_errors_never_quote_the_text_they_were_writing(
    open_store: OpenStore,
) -> None:
    """Such errors are logged (a write failing after its caller left, an outage)."""
    store = await open_store()
    with pytest.raises(IntegrityError) as failure:
        await store._writes.run(
            partial(
                writes.insert_turn,
                turn_id="t",
                sid="no-such-session",
                seq=1,
                request_id="r",
                question=QUESTION,
                now=START,
                content=Content(),
            )
        )
    assert "INSERT INTO turns" in str(failure.value)
    for secret in SECRETS:
        assert secret not in str(failure.value)
        assert secret not in repr(failure.value)


async def test_a_long_sealed_session_opens_off_the_event_loop_alike(
    open_store: OpenStore,
) -> None:
    store = await open_store(content=sealed(KEY_1))
    sid = await converse(store, turns=20)  # beyond what is opened inline
    turns = (await store.get_session(sid, "alice")).turns
    assert [t.question for t in turns] == [f"{QUESTION} ({n})" for n in range(20)]
    assert turns[-1].tool_calls[0].result == {"passages": ["zebra-quartz passage"]}


async def test_the_settings_reach_the_store(tmp_path: Path) -> None:
    async def session_text(**settings: Any) -> str:
        store = await open_session_store(
            session_store_config(Settings(data_dir=tmp_path, **settings))
        )
        try:
            await converse(store)
        finally:
            await store.close()
        database = Database("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}")
        return await raw_dump(database)

    assert "enc:v1:k1:" in await session_text(session_encryption_key=KEY_1)
    with pytest.raises(ConfigurationError, match="entry 1") as failure:
        await open_session_store(
            session_store_config(Settings(data_dir=tmp_path, session_encryption_key="k1"))
        )
    assert KEY_1 not in str(failure.value)
    (tmp_path / "sessions.db").unlink()
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"sessions.db{suffix}").unlink(missing_ok=True)
    dump = await session_text(record_content=False)
    assert all(secret not in dump for secret in SECRETS)


async def test_metadata_is_sealed_like_the_question(
    database: Database, open_store: OpenStore
) -> None:
    """Turn.metadata: kept like the question, sealed when conversations are encrypted."""
    labels = {"client": "zebra-quartz desk"}
    store = await open_store(content=sealed(KEY_1))
    handle = await store.begin_turn(
        session_id=None, owner="alice", question="q", request_id="r", metadata=labels
    )
    assert await store.abort_turn(handle.turn_id, "error", "failed")
    assert (await store.get_session(handle.session_id, "alice")).turns[0].metadata == labels
    assert "zebra-quartz" not in await raw_dump(database)


async def test_metadata_is_not_kept_when_no_text_is_recorded(open_store: OpenStore) -> None:
    labels = {"client": "zebra-quartz desk"}
    plain = await open_store(content=Content(record=False))
    handle = await plain.begin_turn(
        session_id=None, owner="alice", question="q", request_id="r", metadata=labels
    )
    assert (await plain.get_session(handle.session_id, "alice")).turns[0].metadata == {}
