"""A scripted ``/rerank`` endpoint (the API TEI, vLLM, llama.cpp, Jina and Cohere share) on a
free loopback port, in a thread: it answers as ``mode`` says, and records what it was sent.

Modes: ``results`` ({results: [{index, relevance_score}]}, the documents in reverse order, the
last scoring highest), ``list`` (TEI's bare list with ``score``), ``status`` (503),
``not_json``, ``no_results``, ``bad_index``, ``twice`` (an index ranked twice), ``hang``
(answers only once ``release`` is set: the client's timeout or deadline comes first).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Script:
    mode: str = "results"
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    received: threading.Event = field(default_factory=threading.Event)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/rerank"


def _answer(script: Script, body: dict[str, Any]) -> tuple[int, bytes]:
    count = len(body.get("documents", []))
    # Reverse order: the last document is the most relevant.
    ranked = [{"index": i, "relevance_score": (i + 1) / (count + 1)} for i in range(count)]
    tei = [{"index": r["index"], "score": r["relevance_score"]} for r in ranked]
    twice = [{"index": 0, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.8}]
    answers: dict[str, tuple[int, object]] = {
        "results": (200, {"results": ranked}),
        "list": (200, tei),
        "status": (503, {"error": "overloaded"}),
        "no_results": (200, {"data": []}),
        "bad_index": (200, {"results": [{"index": count, "relevance_score": 0.9}]}),
        "twice": (200, {"results": twice}),
    }
    if script.mode == "not_json":
        return 200, b"<html>gateway</html>"
    status, answer = answers[script.mode]
    return status, json.dumps(answer).encode()


@contextmanager
def rerank_server() -> Iterator[Script]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            script.requests.append(body)
            script.headers.append(dict(self.headers.items()))
            script.received.set()
            if script.mode == "hang":
                script.release.wait(30)
                status, data = 200, b'{"results": []}'
            else:
                status, data = _answer(script, body)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up (a timeout under test)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    script.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield script
    finally:
        script.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
