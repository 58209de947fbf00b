"""The session store's own config: what the composition root hands it.

``service.configs`` translates the RAGAGENT_ settings into it; the defaults are theirs (a
test holds them equal), except the URL, which the root always derives (DATABASE_URL, else
SQLite under DATA_DIR).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from service.sessions.engine import DEFAULT_POOL, Pool
from service.sessions.store import DEFAULT_RUN_RETENTION_S, DEFAULT_STALE_TURN_S


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionStoreConfig:
    """Where sessions live, how long, and what of a turn's text is kept."""

    url: str = field(repr=False)  # may carry a password
    ttl_s: float = 1800.0
    stale_turn_s: float = DEFAULT_STALE_TURN_S
    history_tokens: int = 2000
    run_retention_s: float = DEFAULT_RUN_RETENTION_S
    pgbouncer: bool = False
    pool: Pool = DEFAULT_POOL
    record_content: bool = True
    # KEY_ID:BASE64_KEY[,...]: the first seals, all open; None stores text in the clear.
    encryption_key: str | None = field(default=None, repr=False)
