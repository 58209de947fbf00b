"""``ragagent reindex PATH``: rebuild a Qdrant server's collection beside the live one, then
switch to it at once.

For a change that touches every chunk (the chunking, the parser, the payload) while
replicas keep serving: the documents under PATH are ingested into the next generation of
the collection (``<collection>_g<N+1>``, see :mod:`service.retrieval.qdrant_aliases`), and
only when all of them are in are the aliases moved, in one request Qdrant applies
atomically. Searches meanwhile read the live generation; afterwards every replica reads the
new one on its next call, with no restart. Corpus writes (IngestDocuments, DeleteDocument,
``ragagent ingest``) wait for the reindex (it holds the collection's write lease) and give
up after RAGAGENT_CORPUS_LEASE_WAIT, so none is lost in the old generation. A reindex that
fails or is stopped leaves the live collection as it was; the next one starts its
generation afresh. The old generation is kept (``--drop-old`` deletes it) so that pointing
the alias back is a rollback.

A new embedding model is a different case: its vectors do not fit the replicas' model, so
it ships as a new RAGAGENT_QDRANT_COLLECTION rolled out with the new model (docs/operations.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ragagent.v1 import corpus_pb2

from service.access import labels
from service.commands.flags import settings_with_flags
from service.commands.ingest import add_access_flags, usage_problem
from service.commands.interrupt import Interrupted, until_signalled
from service.config import Settings
from service.errors import ConfigurationError, RagAgentError
from service.observability.logging import configure_logging, get_logger

if TYPE_CHECKING:
    from service.ingest.outcome import IngestSummary
    from service.retrieval.qdrant_store import QdrantStore

log = get_logger("ragagent.reindex")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "reindex",
        help="rebuild a Qdrant server's collection beside the live one, then switch at once",
        description="Ingests the documents under PATH into a new generation of "
        "RAGAGENT_QDRANT_COLLECTION and moves its alias there atomically once every document "
        "is in; replicas keep serving the old generation until then.",
    )
    parser.add_argument("path", type=Path, metavar="PATH", help="root folder of the documents")
    parser.add_argument(
        "--base-url", default="", help="site URL the pages are published under (for links)"
    )
    add_access_flags(parser)
    parser.add_argument(
        "--drop-old", action="store_true", help="delete the previous generation after the switch"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run_reindex)


async def run_reindex(args: argparse.Namespace) -> int:
    settings = settings_with_flags()
    configure_logging(settings.log_level, settings.log_format)
    return await reindex_command(args, settings=settings)


async def reindex_command(
    args: argparse.Namespace, *, settings: Settings, out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:  # fmt: skip
    out = out or sys.stdout
    err = err or sys.stderr
    if settings.qdrant_url is None:
        print(
            "ragagent: reindex switches a Qdrant server's collection alias; the embedded store "
            "(no RAGAGENT_QDRANT_URL) is rebuilt with `ragagent ingest PATH --prune`",
            file=err,
        )
        return 2
    requested = corpus_pb2.DocumentAccess(groups=args.group, principals=args.principal)
    problem = usage_problem(args.path, args.base_url, requested)  # as `ragagent ingest` checks
    if problem:
        print(f"ragagent: {problem}", file=err)
        return 2
    access = labels(args.group, args.principal)
    from service.runtime import Runtime  # the server's imports load slowly

    runtime = await Runtime.open(settings)
    try:
        report = await until_signalled(_reindex(runtime, settings, args, access))
    except (RagAgentError, ConfigurationError) as error:
        print(f"ragagent: reindex failed, the live collection is unchanged: {error}", file=err)
        return 1
    except Interrupted as stopped:
        print(
            f"ragagent: reindex stopped by {stopped.signal_name}; the live collection is "
            "unchanged (the next reindex starts its generation afresh)",
            file=err,
            flush=True,
        )
        raise
    finally:
        await runtime.close()
    if args.json:
        print(json.dumps(report), file=out)
    else:
        print(
            f"reindexed {report['documents']} documents ({report['chunks']} chunks) into "
            f"{report['generation']}; {report['alias']} now names it (was {report['previous']}"
            f"{', deleted' if report['dropped'] else ', kept for a rollback'})",
            file=out,
        )
    return 0


async def _reindex(
    runtime: Any, settings: Settings, args: argparse.Namespace, access: tuple[str, ...]
) -> dict[str, Any]:
    # Imported here: the other commands' start-up does not pay for qdrant_client (1.5 s).
    from service.fleet.lease import LocalLease, corpus_lease
    from service.ingest import Ingestor
    from service.ingest.loader import SourceFolder
    from service.retrieval import qdrant_aliases
    from service.retrieval.qdrant_store import QdrantStore

    live: QdrantStore = runtime.store
    calls = live.calls
    alias = settings.qdrant_collection
    current = (await qdrant_aliases.aliases(calls, None)).get(alias)
    if current is None:
        raise ConfigurationError(
            f"{alias!r} is a collection, not an alias (it was not made by ragagent's first "
            "start): ingest into a new RAGAGENT_QDRANT_COLLECTION instead"
        )
    number = qdrant_aliases.generation_number(alias, current) + 1
    target = qdrant_aliases.generation(alias, number)
    # Held for the whole rebuild: no write can land in the generation being replaced.
    async with corpus_lease(
        live, ttl=settings.corpus_lease_ttl, wait=settings.corpus_lease_wait
    ).hold(None):
        await _drop(calls, target)  # what an earlier, unfinished reindex left
        fresh = QdrantStore(
            calls.client,
            live.embedder,
            collection=target,
            timeout=settings.qdrant_timeout,
            hybrid=live.hybrid,
            cluster=live.cluster,
            read_consistency=calls.read_consistency,
        )
        await fresh.create_generation(target)
        log.info("reindexing", alias=alias, live=current, building=target)
        ingestor = Ingestor(
            live.embedder,
            fresh,
            executor=runtime.executor,
            lease=LocalLease(),  # the generation has one writer: this command
            document_cpu_seconds=settings.ingest_document_cpu_seconds,
        )
        folder = SourceFolder(args.path)
        summary: IngestSummary = await ingestor.ingest(
            iter(folder), base_url=args.base_url, access=access
        )
        await qdrant_aliases.point(calls, alias, target, None)
        log.info("alias switched", alias=alias, to=target, was=current)
    if args.drop_old:
        await _drop(calls, current)
    return {
        "alias": alias,
        "generation": target,
        "previous": current,
        "dropped": bool(args.drop_old),
        "documents": summary.added + summary.updated + summary.unchanged,
        "chunks": summary.chunks_written,
        "warnings": summary.warnings,
        "duration_s": round(summary.duration_s, 3),
    }


async def _drop(calls: Any, collection: str) -> None:
    from service.retrieval import qdrant_aliases

    for name in (collection, qdrant_aliases.records_of(collection)):
        await calls.run(partial(calls.client.delete_collection, name), None, "dropping " + name)
