"""Multi-turn sessions: storage, expiry, one-turn-at-a-time, and the purger.

See :mod:`service.sessions.store` for the concurrency and atomicity rules.
"""

from __future__ import annotations

from service.config import Settings
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
    "RunStatus",
    "SessionPurger",
    "SessionRecord",
    "SessionStatus",
    "SessionStore",
    "TokenCounter",
    "TurnHandle",
    "TurnRecord",
    "approx_tokens",
    "open_session_store",
    "run_purger",
    "utc_now",
]


async def open_session_store(settings: Settings, *, clock: Clock = utc_now) -> SessionStore:
    """The store the settings describe: RAGAGENT_DATABASE_URL, else SQLite under DATA_DIR."""
    url = (
        settings.database_url.get_secret_value()
        if settings.database_url is not None
        else sqlite_url(settings.data_dir)
    )
    return await SessionStore.open(
        url,
        ttl_s=settings.session_ttl,
        stale_turn_s=settings.turn_lease,
        history_tokens=settings.session_history_tokens,
        clock=clock,
        pgbouncer=settings.database_pgbouncer,
        pool=Pool(
            size=settings.database_pool_size,
            max_overflow=settings.database_max_overflow,
            timeout_s=settings.database_pool_timeout,
        ),
        content=Content.from_settings(
            record=settings.record_content,
            key=key.get_secret_value() if (key := settings.session_encryption_key) else None,
        ),
    )
