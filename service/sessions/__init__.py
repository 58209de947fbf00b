"""Multi-turn sessions: storage, expiry, one-turn-at-a-time, and the purger.

See :mod:`service.sessions.store` for the concurrency and atomicity rules.
"""

from __future__ import annotations

from service.sessions.config import SessionStoreConfig
from service.sessions.engine import Pool, sqlite_url
from service.sessions.purger import SessionPurger, run_purger
from service.sessions.records import (
    MAX_MESSAGE_CHARS,
    Clock,
    RunStatus,
    SessionRecord,
    SessionStatus,
    TokenCounter,
    TurnHandle,
    TurnRecord,
    approx_tokens,
    utc_now,
)
from service.sessions.sealing import Content
from service.sessions.store import DEFAULT_STALE_TURN_S, SessionStore

__all__ = [
    "DEFAULT_STALE_TURN_S",
    "MAX_MESSAGE_CHARS",
    "Clock",
    "Pool",
    "RunStatus",
    "SessionPurger",
    "SessionRecord",
    "SessionStatus",
    "SessionStore",
    "SessionStoreConfig",
    "TokenCounter",
    "TurnHandle",
    "TurnRecord",
    "approx_tokens",
    "open_session_store",
    "run_purger",
    "sqlite_url",
    "utc_now",
]


async def open_session_store(config: SessionStoreConfig, *, clock: Clock = utc_now) -> SessionStore:
    """The store ``config`` describes, its schema made or checked."""
    return await SessionStore.open(
        config.url,
        ttl_s=config.ttl_s,
        stale_turn_s=config.stale_turn_s,
        history_tokens=config.history_tokens,
        run_retention_s=config.run_retention_s,
        clock=clock,
        pgbouncer=config.pgbouncer,
        pool=config.pool,
        content=Content.from_key(record=config.record_content, key=config.encryption_key),
    )
