"""Alembic's entry point: runs the revisions on the connection the service passes in
(:func:`service.sessions.migrations.migrate`), inside the transaction it holds."""

from __future__ import annotations

from alembic import context

from service.sessions.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "the session schema is migrated by the service at start-up (RAGAGENT_DATABASE_URL); "
        "write a new revision in service/sessions/migrations/versions/ by hand"
    )
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():  # the caller's transaction: committed by the caller
    context.run_migrations()
