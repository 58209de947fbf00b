"""A server with CorpusService and AgentService over a real Runtime, and a small docs tree.

Built here rather than with ``running_server`` because AgentServer does not register the
CorpusService yet; the interceptor is the real one, so validation and errors are too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_status import rpc_status
from ragagent.v1 import agent_pb2_grpc, corpus_pb2, corpus_pb2_grpc

from service.agent import Agent
from service.api.agent import AgentServicer
from service.api.corpus import CorpusServicer
from service.config import Settings
from service.configs import agent_config
from service.ingest.loader import SourceDocument
from service.runtime import Runtime
from service.server import interceptor_chain
from tests.helpers import local_embedder

BASE_URL = "https://robots.example/"

# Five pages on distinct topics, laid out like the textbook (module/chapter folders).
PAGES: dict[str, str] = {
    "intro.md": """# Course overview

This course teaches physical AI over thirteen weeks. Students build a walking humanoid
robot and program it step by step, from middleware to perception to speech.
""",
    "module-01-foundations/chapter-01-ros2/page-01-nodes.md": """---
title: ROS 2 nodes
---

# ROS 2 nodes

A ROS 2 system is a graph of nodes. Each node is a process that does one job, such as
reading a sensor or driving a motor.

## Topics

Nodes exchange messages over named topics. Publishers write to a topic and subscribers
read from it. The middleware that carries the messages between nodes is DDS, the Data
Distribution Service, which discovers peers on the network by itself.
""",
    "module-01-foundations/chapter-02-urdf/page-01-urdf.md": """# Describing a robot with URDF

A URDF file is an XML document that describes the links and joints of a robot. A link is
one rigid body with its mass and its shape; a joint connects a parent link to a child link
and says how the child moves.

## Joint types

Revolute joints rotate around an axis within limits, prismatic joints slide along one, and
fixed joints hold two links together without any motion.
""",
    "module-02-perception/chapter-03-vision/page-01-depth.mdx": """---
title: Depth cameras
---

import Figure from '@site/src/components/Figure';

# Depth cameras

A depth camera measures how far away each pixel is. Stereo cameras compare two images
taken side by side; time-of-flight cameras time a pulse of infrared light.

<Figure caption="A stereo pair" />
""",
    "module-02-perception/chapter-04-speech/page-01-whisper.md": """# Speech commands

Whisper is a speech recognition model that turns spoken commands into text. The robot
listens through a microphone array, transcribes what it hears with Whisper, and hands the
text to the planner.
""",
}


def write_pages(root: Path, pages: Mapping[str, str] = PAGES) -> Path:
    """Writes the pages under ``root`` (created) and returns it."""
    for relative, text in pages.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def documents(pages: Mapping[str, str] = PAGES) -> list[SourceDocument]:
    return [SourceDocument(path, text) for path, text in pages.items()]


async def open_test_runtime(settings: Settings) -> Runtime:
    """Runtime.open with the session's already loaded embedding model."""
    return await Runtime.open(settings, embedder=local_embedder())


def settings_for(data_dir: Path, **overrides: object) -> Settings:
    return Settings(address="127.0.0.1:0", data_dir=data_dir, **overrides)  # type: ignore[arg-type]


@dataclass
class CorpusServer:
    settings: Settings
    runtime: Runtime
    port: int
    channel: grpc.aio.Channel

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def corpus(self) -> corpus_pb2_grpc.CorpusServiceAsyncStub:
        return corpus_pb2_grpc.CorpusServiceStub(self.channel)

    @property
    def agent(self) -> agent_pb2_grpc.AgentServiceAsyncStub:
        return agent_pb2_grpc.AgentServiceStub(self.channel)

    async def list_all(self, page_size: int = 0) -> list[corpus_pb2.DocumentInfo]:
        found: list[corpus_pb2.DocumentInfo] = []
        token = ""
        while True:
            page = await self.corpus.ListDocuments(
                corpus_pb2.ListDocumentsRequest(page_size=page_size, page_token=token), timeout=10
            )
            found.extend(page.documents)
            token = page.next_page_token
            if not token:
                return found


@asynccontextmanager
async def corpus_server(data_dir: Path, **overrides: object) -> AsyncIterator[CorpusServer]:
    """CorpusService and AgentService (extractive) on a free loopback port, with a channel."""
    settings = settings_for(data_dir, **overrides)
    runtime = await open_test_runtime(settings)
    server = grpc.aio.server(interceptors=[interceptor_chain()])
    corpus_pb2_grpc.add_CorpusServiceServicer_to_server(
        CorpusServicer(runtime.ingestor, runtime.store), server
    )
    agent = Agent(
        agent_config(settings),
        retriever=runtime.retriever,
        embedder=runtime.embedder,
        strategy="extractive",
    )
    agent_pb2_grpc.add_AgentServiceServicer_to_server(
        AgentServicer(
            runtime.retriever,
            runtime.embedder,
            default_threshold=settings.confidence_threshold,
            agent=agent,
        ),
        server,
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield CorpusServer(settings, runtime, port, channel)
    finally:
        await server.stop(0)
        await runtime.close()


def error_details(error: grpc.aio.AioRpcError) -> list[object]:
    """The unpacked google.rpc details of a failed call."""
    from google.rpc import error_details_pb2

    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    found: list[object] = []
    for detail in status.details:
        for kind in (
            error_details_pb2.BadRequest,
            error_details_pb2.ErrorInfo,
            error_details_pb2.ResourceInfo,
        ):
            message = kind()
            if detail.Unpack(message):
                found.append(message)
    return found


def violations(error: grpc.aio.AioRpcError) -> dict[str, str]:
    """field -> description of a BadRequest detail."""
    from google.rpc import error_details_pb2

    return {
        v.field: v.description
        for d in error_details(error)
        if isinstance(d, error_details_pb2.BadRequest)
        for v in d.field_violations
    }
