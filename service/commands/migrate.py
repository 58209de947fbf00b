"""``ragagent migrate``: moves an old embedded store to qdrant-edge, showing progress.

The server does the same on its first start; this command does it ahead of time (a large
store takes a while, and a start-up should not). Nothing is deleted: the old folder is kept
as ``qdrant.migrated`` beside the new one.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from service.commands.flags import Flag, settings_with_flags
from service.observability.logging import configure_logging


def register(commands: Any) -> None:
    migrate = commands.add_parser(
        "migrate", help="move an embedded store of the old format to qdrant-edge"
    )
    migrate.add_argument("--data-dir", type=Path, help="state folder (default: RAGAGENT_DATA_DIR)")
    migrate.set_defaults(run=run_migrate)


async def run_migrate(args: argparse.Namespace) -> int:
    from service.executor import BlockingExecutor
    from service.retrieval.edge_migrate import migrate_local, migrated_path, old_store_holds
    from service.retrieval.edge_store import EdgeStore
    from service.runtime import build_embedder

    settings = settings_with_flags(Flag("--data-dir", "data_dir", args.data_dir))
    configure_logging(settings.log_level, settings.log_format)
    old, collection = settings.qdrant_path, settings.qdrant_collection
    if not old_store_holds(old, collection):
        done = migrated_path(old).exists()
        print(f"nothing to migrate in {old}" + (" (already migrated)" if done else ""))
        return 0

    def progress(copied: int, total: int) -> None:
        print(f"\rmigrating: {copied}/{total} chunks", end="", file=sys.stderr, flush=True)

    async with AsyncExitStack() as stack:
        executor = BlockingExecutor(settings.blocking_threads)
        stack.push_async_callback(executor.shutdown)
        embedder = await build_embedder(settings, stack, executor)
        store = await EdgeStore.open(
            settings.edge_path, embedder, collection=collection, executor=executor
        )
        stack.push_async_callback(store.close)
        result = await migrate_local(old, store, executor=executor, progress=progress)
    print(file=sys.stderr)
    print(
        f"migrated {result.chunks} chunks of {result.documents} complete documents to "
        f"{settings.edge_path}; the old store is kept in {result.kept_at}"
    )
    return 0
