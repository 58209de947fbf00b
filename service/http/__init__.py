"""The HTTP transport: every RPC over Connect (JSON and binary) and gRPC-Web, for browsers,
curl and buf curl, backed by the servicers the gRPC server registers (docs/clients.md).

- :mod:`.chain`: the gRPC chain's layers as connectrpc interceptors, errors mapped once;
- :mod:`.bridge`: a Connect handler per RPC that calls the grpc servicer;
- :mod:`.app`: routing, CORS and the chat widget's files;
- :mod:`.listener`: uvicorn on the gRPC server's event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from connectrpc.compat import google_protobuf_codecs
from grpc_health.v1 import health_pb2
from ragagent.v1 import (
    agent_connect,
    agent_pb2,
    corpus_connect,
    corpus_pb2,
    session_connect,
    session_pb2,
)

from service.api.interceptors import Layer
from service.http.app import DescriptorApplication, HttpApp
from service.http.bridge import bridge
from service.http.chain import CallEnds, CallStarts
from service.http.listener import HttpListener

__all__ = ["HttpListener", "connect_application", "default_web_dir"]

AGENT = agent_pb2.DESCRIPTOR.services_by_name["AgentService"]
CORPUS = corpus_pb2.DESCRIPTOR.services_by_name["CorpusService"]
SESSION = session_pb2.DESCRIPTOR.services_by_name["SessionService"]
HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"]


def default_web_dir() -> Path:
    """The built chat widget of a source checkout (``make web`` builds it)."""
    return Path(__file__).resolve().parents[2] / "web" / "dist"


def connect_application(
    *,
    agent: Any,
    corpus: Any,
    sessions: Any | None,
    health: Any,
    layers: Sequence[Layer],
    max_message_bytes: int,
    cors_origins: frozenset[str] = frozenset(),
    web: Path | None = None,
) -> HttpApp:
    """The ASGI application serving the given grpc servicers over Connect and gRPC-Web,
    with ``layers`` (the gRPC chain's, the same objects) around every call."""
    options: dict[str, Any] = {
        "interceptors": [CallEnds(layers), CallStarts(layers)],
        "read_max_bytes": max_message_bytes,
        "codecs": google_protobuf_codecs(),
    }
    apps: list[Any] = [
        agent_connect.AgentServiceASGIApplication(bridge(agent, AGENT, layers), **options),
        corpus_connect.CorpusServiceASGIApplication(bridge(corpus, CORPUS, layers), **options),
        DescriptorApplication(HEALTH, bridge(health, HEALTH, layers), **options),
    ]
    if sessions is not None:
        apps.append(
            session_connect.SessionServiceASGIApplication(
                bridge(sessions, SESSION, layers), **options
            )
        )
    served = [AGENT, CORPUS, HEALTH, *([SESSION] if sessions is not None else [])]
    methods = frozenset(f"/{s.full_name}/{m.name}" for s in served for m in s.methods)
    return HttpApp(
        {app.path: app for app in apps}, methods=methods, cors_origins=cors_origins, web=web
    )
