"""``ragagent demo``: the service's main job end to end on embedded defaults.

Ingests a sample corpus (this project's own docs/ unless told otherwise), starts the real
server on a free port, asks a question over AskStream and prints the answer as it arrives
with its sources, then shuts the server down. Needs no key and no servers: with no model
configured the answer is extractive.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import grpc
from ragagent.v1 import agent_pb2

from service.commands.ask import stream_answer
from service.commands.channel import in_process
from service.commands.flags import Flag, settings_with_flags
from service.config import Settings
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
    demo.add_argument(
        "--keep-serving",
        action="store_true",
        help="after the questions, keep serving (the chat page too) until Ctrl+C",
    )
    demo.add_argument("question", nargs="*", help="questions to ask (default: two about ragagent)")
    demo.set_defaults(run=run_demo)


async def run_demo(args: argparse.Namespace) -> int:
    from service.ingest.loader import load_documents
    from service.runtime import Runtime
    from service.server import AgentServer
    from service.wiring.heap import settle_heap

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
    settle_heap()  # the ingest below allocates on the loop: keep its collections short
    try:
        summary = await runtime.ingestor.ingest(load_documents(args.corpus), base_url=args.base_url)
        out.write(
            f"ingested {args.corpus}: {summary.added} added, {summary.updated} updated, "
            f"{summary.unchanged} unchanged, {summary.chunks_written} chunks written "
            f"in {summary.duration_s:.1f}s\n"
        )
        server = AgentServer(_with_http(in_process(settings)), runtime)
        port = await server.start()
        out.write(f"serving on 127.0.0.1:{port}\n")
        if server.http is not None:
            http = f"http://127.0.0.1:{server.http_port}"
            if server.http_web:
                out.write(f"chat in a browser: {http}/\n")
            out.write(
                "from a shell: curl -H 'Content-Type: application/json' -d "
                f'\'{{"query": "..."}}\' {http}/ragagent.v1.AgentService/Retrieve\n'
            )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                for question in args.question or DEFAULT_QUESTIONS:
                    out.write(f"\n> {question}\n")
                    await stream_answer(
                        channel, agent_pb2.QuestionRequest(query=question), out=out, deadline_s=120
                    )
            if args.keep_serving:
                out.write("\nserving until Ctrl+C\n")
                out.flush()
                await _until_interrupted()
        finally:
            await server.stop(grace=1)
    finally:
        await runtime.close()
    return 0


def _with_http(settings: Settings) -> Settings:
    """The demo's server also serves Connect and the chat page on a free loopback port
    (unless RAGAGENT_HTTP_ADDRESS names one); the page only where it is built."""
    from service.http import default_web_dir

    web = ((settings.http_web_dir or default_web_dir()) / "index.html").is_file()
    return settings.model_copy(
        update={"http_address": settings.http_address or "127.0.0.1:0", "http_web": web}
    )


async def _until_interrupted() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
