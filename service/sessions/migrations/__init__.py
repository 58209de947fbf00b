"""The session database's schema, created and upgraded by the service at start-up (Alembic).

The revisions live in ``versions/`` (one initial schema so far: no release of ragagent ever
wrote an older one). At start-up the pending revisions run in order inside one transaction,
so a failed upgrade leaves the database as it was (SQLite and PostgreSQL both have
transactional DDL); on PostgreSQL the transaction first takes an advisory lock, so that
replicas starting at the same moment upgrade one after the other instead of racing.

A revision, once released, never changes: it describes how the schema *was* changed, and
databases in the field went through it; :mod:`service.sessions.schema` describes the latest
schema, and a test holds the two equal (Alembic's own comparison). A database at a revision
this release does not know (a newer release's) is refused rather than guessed at, and so is
one from the pre-release builds (a ``schema_version`` table), which no release can read.

Adding a revision: change ``schema.py``, write ``versions/rNNNN_what.py`` (from
``script.py.mako``) with the next ``down_revision``; ``tests/sessions/test_migrations.py``
fails until the revisions build exactly ``schema.py``.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from service.errors import ConfigurationError
from service.sessions.engine import transaction, writer

HERE = Path(__file__).resolve().parent


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, with no ini file: the revisions of this package, run on
    ``connection`` (an open transaction the caller owns)."""
    config = Config()
    config.set_main_option("script_location", str(HERE))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision this release knows."""
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if revision is None:  # pragma: no cover (the package ships its revisions)
        raise RuntimeError("the session schema has no revisions")
    return revision


async def migrate(engine: AsyncEngine, *, target: str = "head") -> str:
    """Applies the revisions up to ``target`` that the database lacks; returns its revision."""
    async with transaction(writer(engine)) as connection:
        if connection.dialect.name == "postgresql":
            # Scoped to the schema, so separate schemas (tests, tenants) do not wait on
            # each other; released with the transaction.
            await connection.execute(
                text(
                    "SELECT pg_advisory_xact_lock("
                    "hashtext('ragagent.sessions:' || current_schema()))"
                )
            )
        return await connection.run_sync(_upgrade, target)


def _upgrade(connection: Connection, target: str) -> str:
    if inspect(connection).has_table("schema_version"):
        raise ConfigurationError(
            "the session database was made by a pre-release build of ragagent (it has a "
            "schema_version table), which this release cannot read; move it away or point "
            "RAGAGENT_DATABASE_URL elsewhere"
        )
    config = alembic_config(connection)
    current = MigrationContext.configure(connection).get_current_revision()
    known = {script.revision for script in ScriptDirectory.from_config(config).walk_revisions()}
    if current is not None and current not in known:
        raise ConfigurationError(
            f"the session database has schema revision {current!r}, which this release does "
            f"not know (a newer release made it; this one's newest is {head()!r}); upgrade "
            "ragagent or point RAGAGENT_DATABASE_URL elsewhere"
        )
    command.upgrade(config, target)
    revision = MigrationContext.configure(connection).get_current_revision()
    return revision or ""
