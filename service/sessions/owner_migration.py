"""Namespacing the owners of sessions written before owners were namespaced (issue 26).

Owners used to be bare names (``alice``), shared by every way of authenticating; now they
are ``key:alice``, ``jwt:<issuer>|alice``, ``cert:<SAN>``, ``header:<value>`` or
``anon:<x-user-id>`` (see Principal.owner). A bare owner cannot say how it authenticated,
so the operator says it: the method the server used when those sessions were written
(``api-key``, ``jwt`` with its issuer, ``certificate``, ``trusted-header`` or ``none``).
Rows already namespaced are left alone, so running it twice changes nothing. Not wired
into start-up on purpose: guessing the method would hand sessions to the wrong owner.
"""

from __future__ import annotations

from sqlalchemy import and_, not_, or_, update
from sqlalchemy.ext.asyncio import AsyncEngine

from service.owners import OWNER_PREFIXES, owner_id
from service.sessions import schema


def is_namespaced(owner: str) -> bool:
    return owner.startswith(tuple(f"{prefix}:" for prefix in OWNER_PREFIXES.values()))


async def namespace_session_owners(engine: AsyncEngine, method: str, scope: str = "") -> int:
    """Rewrites every bare, non-empty session owner as ``method``'s owner id (``scope``:
    the JWT issuer); returns how many sessions it changed."""
    if method not in OWNER_PREFIXES:
        raise ValueError(f"method must be one of {', '.join(OWNER_PREFIXES)}, not {method!r}")
    owner = schema.sessions.c.owner
    already = or_(*(owner.like(f"{prefix}:%") for prefix in OWNER_PREFIXES.values()))
    changed = 0
    async with engine.begin() as connection:
        rows = await connection.execute(
            schema.sessions.select()
            .with_only_columns(owner)
            .where(and_(owner != "", not_(already)))
            .distinct()
        )
        for (bare,) in rows.all():
            result = await connection.execute(
                update(schema.sessions)
                .where(owner == bare)
                .values(owner=owner_id(method, bare, scope))
            )
            changed += result.rowcount
    return changed
