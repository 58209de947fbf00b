"""``ragagent demo``: the service's main job end to end on embedded defaults.

Ingests a sample corpus (this project's own docs/ unless told otherwise), starts the real
server on a free port, asks a question over AskStream and prints the answer as it arrives
with its sources, then shuts the server down. Needs no key and no servers: with no model
configured the answer is extractive.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import grpc
from ragagent.v1 import agent_pb2

from service.commands.ask import stream_answer
from service.commands.channel import in_process
from service.commands.flags import Flag, settings_with_flags
from service.ingest.loader import load_documents
from service.ingest.pipeline import Ingestor
from service.observability.logging import configure_logging

DEFAULT_QUESTIONS = (
    "What happens when the server receives SIGTERM?",
    "Why can only one process open the embedded store?",
)


def register(commands: Any) -> None:
    demo = commands.add_parser("demo", help="ingest a sample corpus, serve it, stream answers")
    demo.add_argument(
        "--corpus", type=Path, default=Path("docs"), help="folder of Markdown (default: docs)"
    )
    demo.add_argument("--base-url", default="https://ragagent.dev/", help="site URL of the corpus")
    demo.add_argument("--data-dir", type=Path, help="state folder (default: RAGAGENT_DATA_DIR)")
    demo.add_argument("question", nargs="*", help="questions to ask (default: two about ragagent)")
    demo.set_defaults(run=run_demo)


async def run_demo(args: argparse.Namespace) -> int:
    from service.runtime import Runtime
    from service.server import AgentServer

    settings = settings_with_flags(
        Flag("--data-dir", "data_dir", args.data_dir), address="127.0.0.1:0", log_level="WARNING"
    )
    configure_logging(settings.log_level, settings.log_format)
    if not args.corpus.is_dir():
        what = "is a file, not a folder" if args.corpus.is_file() else "no such folder"
        print(f"ragagent: --corpus {args.corpus}: {what}", file=sys.stderr)
        return 2
    out = sys.stdout
    out.write(
        f"ragagent demo: strategy {settings.effective_strategy}, data in {settings.data_dir}\n"
    )
    runtime = await Runtime.open(settings)
    try:
        ingestor = Ingestor(runtime.embedder, runtime.store)
        summary = await ingestor.ingest(load_documents(args.corpus), base_url=args.base_url)
        out.write(
            f"ingested {args.corpus}: {summary.added} added, {summary.updated} updated, "
            f"{summary.unchanged} unchanged, {summary.chunks_written} chunks written "
            f"in {summary.duration_s:.1f}s\n"
        )
        server = AgentServer(in_process(settings), runtime)
        port = await server.start()
        out.write(f"serving on 127.0.0.1:{port}\n")
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                for question in args.question or DEFAULT_QUESTIONS:
                    out.write(f"\n> {question}\n")
                    await stream_answer(
                        channel, agent_pb2.QuestionRequest(query=question), out=out, deadline_s=120
                    )
        finally:
            await server.stop(grace=1)
    finally:
        await runtime.close()
    return 0
