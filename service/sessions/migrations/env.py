"""Alembic's entry point: runs the revisions on the connection the service passes in
(:func:`service.sessions.migrations.migrate`), inside the transaction it holds, or, for
``alembic revision --autogenerate`` at a shell, on a scratch SQLite file."""

from __future__ import annotations

import tempfile
from pathlib import Path

from alembic import context
from sqlalchemy import create_engine

from service.sessions.schema import metadata

connection = context.config.attributes.get("connection")
if connection is not None:
    context.configure(connection=connection, target_metadata=metadata)
    with context.begin_transaction():  # the caller's transaction: committed by the caller
        context.run_migrations()
else:
    with tempfile.TemporaryDirectory() as scratch:
        engine = create_engine(f"sqlite:///{Path(scratch) / 'draft.db'}")
        with engine.begin() as scratch_connection:
            context.configure(
                connection=scratch_connection, target_metadata=metadata, render_as_batch=True
            )
            with context.begin_transaction():
                context.run_migrations()
        engine.dispose()
