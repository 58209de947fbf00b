"""A stand-in for a Qdrant server, for the fleet tests: Qdrant's REST API over HTTP, backed
by qdrant-client's local mode.

What it is: an HTTP/1.1 server on a free loopback port that answers the REST calls the
service makes (collection exists/info/create/delete, payload indexes, aliases, upsert with
``update_filter``/``update_mode``, retrieve, delete, count, scroll, query) in Qdrant's JSON
envelope, so that ``ragagent serve`` and ``ragagent ingest`` run their real
``AsyncQdrantClient`` code against it, as they would against a server. Creating a
collection that exists answers 409, as Qdrant does. ``inject`` makes chosen calls answer a
status (409, 503, ...) a number of times, and ``latency`` delays every call, so that
interleavings a real cluster produces happen here too. Calls are applied one at a time under
one lock, which is how a single Qdrant shard orders its updates.

What it is not: Qdrant. No gRPC, no API keys, no shards or replicas (the consistency and
shard parameters are accepted, recorded and ignored), no snapshots, no persistence, and
only the endpoints listed above; local mode's scoring and filtering are Qdrant's semantics
re-implemented in Python, not the server's engine. A test that passes here proves the
service's behaviour under these answers, not Qdrant's performance.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from qdrant_client import QdrantClient, models


@dataclass
class Fault:
    """Answer ``status`` to the next ``times`` calls whose ``METHOD path`` matches ``pattern``."""

    pattern: re.Pattern[str]
    status: int
    times: int


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, tuple):
        return [_dump(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    return value


class _Server(ThreadingHTTPServer):
    # socketserver's default backlog is 5: twenty writers connecting at once on a busy
    # machine overflowed it and saw their connections reset (httpcore.ReadError), which a
    # real Qdrant (backlog in the hundreds) would not do.
    request_queue_size = 128
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that closes its keep-alive connection is normal; anything else is shown.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class QdrantStandIn:
    """The server; ``url`` is what RAGAGENT_QDRANT_URL takes. Use :func:`qdrant_standin`."""

    def __init__(self, *, latency: float = 0.0) -> None:
        self.local = QdrantClient(":memory:")
        self.latency = latency
        self.lock = threading.Lock()
        self._faults: list[Fault] = []
        self.calls: list[str] = []  # "METHOD path" of every call answered, in order
        self.answered: dict[int, int] = {}  # status -> count
        self.created: dict[str, Any] = {}  # collection -> the body that created it
        # "METHOD path" and the ``consistency`` query parameter of every read of points.
        self.reads: list[tuple[str, str | None]] = []
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, body = standin.answer(self.command, self.path, raw)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _handle

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.local.close()

    def inject(self, pattern: str, status: int, times: int = 1) -> None:
        """The next ``times`` calls matching ``pattern`` (a regex searched in "METHOD path",
        e.g. ``"PUT /collections/docs$"``) answer ``status`` without being applied."""
        with self.lock:
            self._faults.append(Fault(re.compile(pattern), status, times))

    def _fault(self, call: str) -> int | None:
        with self.lock:
            for fault in self._faults:
                if fault.times > 0 and fault.pattern.search(call):
                    fault.times -= 1
                    return fault.status
        return None

    def answer(self, method: str, target: str, raw: bytes) -> tuple[int, Any]:
        parsed = urlparse(target)
        call = f"{method} {parsed.path}"
        if self.latency:
            time.sleep(self.latency)
        status = self._fault(call)
        if status is not None:
            return self._error(status, call, f"injected {status}")
        body = json.loads(raw) if raw else {}
        started = time.perf_counter()
        try:
            with self.lock:
                result = self._route(method, parsed.path, body, parse_qs(parsed.query))
        except _HttpError as exc:
            return self._error(exc.status, call, str(exc))
        except Exception as exc:  # whatever local mode raises is the client's error
            status = 409 if "already exists" in str(exc) else 400
            if "not found" in str(exc).lower() or "does not exist" in str(exc):
                status = 404
            return self._error(status, call, f"Wrong input: {exc}")
        self._count(call, 200)
        if method == "POST" and re.fullmatch(_C + r"/points(/scroll|/query)?", parsed.path):
            with self.lock:
                self.reads.append((call, parse_qs(parsed.query).get("consistency", [None])[0]))
        if method == "PUT" and re.fullmatch(_C, parsed.path):
            with self.lock:
                self.created[parsed.path.rsplit("/", 1)[1]] = body
        return 200, {"result": _dump(result), "status": "ok", "time": time.perf_counter() - started}

    def _count(self, call: str, status: int) -> None:
        with self.lock:
            self.calls.append(call)
            self.answered[status] = self.answered.get(status, 0) + 1

    def _error(self, status: int, call: str, message: str) -> tuple[int, Any]:
        self._count(call, status)
        return status, {"status": {"error": message}, "time": 0.0}

    def _route(self, method: str, path: str, body: Any, query: dict[str, list[str]]) -> Any:
        for (verb, pattern), handler in _ROUTES.items():
            match = re.fullmatch(pattern, path)
            if match and verb == method:
                return handler(self.local, body, *match.groups())
        raise _HttpError(404, f"the stand-in does not serve {method} {path}")


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _update() -> models.UpdateResult:
    return models.UpdateResult(operation_id=0, status=models.UpdateStatus.COMPLETED)


def _create(local: QdrantClient, body: Any, name: str) -> bool:
    if local.collection_exists(name):
        raise _HttpError(409, f"Collection `{name}` already exists!")
    request = models.CreateCollection.model_validate(body)
    return local.create_collection(
        name,
        vectors_config=request.vectors if request.vectors is not None else {},
        sparse_vectors_config=request.sparse_vectors,
        metadata=request.metadata,
    )


def _collection(local: QdrantClient, name: str) -> str:
    if not local.collection_exists(name):
        raise _HttpError(404, f"Collection `{name}` doesn't exist!")
    return name


def _upsert(local: QdrantClient, body: Any, name: str) -> models.UpdateResult:
    request = models.PointsList.model_validate(body)
    local.upsert(
        _collection(local, name),
        points=request.points,
        update_filter=request.update_filter,
        update_mode=request.update_mode,
    )
    return _update()


def _delete_points(local: QdrantClient, body: Any, name: str) -> models.UpdateResult:
    selector: models.PointsSelector
    if "filter" in body:
        selector = models.FilterSelector.model_validate(body)
    else:
        selector = models.PointIdsList.model_validate(body)
    local.delete(_collection(local, name), points_selector=selector)
    return _update()


def _retrieve(local: QdrantClient, body: Any, name: str) -> Any:
    request = models.PointRequest.model_validate(body)
    return local.retrieve(
        _collection(local, name),
        ids=request.ids,
        with_payload=request.with_payload if request.with_payload is not None else True,
        with_vectors=request.with_vector or False,
    )


def _count(local: QdrantClient, body: Any, name: str) -> Any:
    request = models.CountRequest.model_validate(body)
    return local.count(_collection(local, name), count_filter=request.filter, exact=True)


def _scroll(local: QdrantClient, body: Any, name: str) -> Any:
    request = models.ScrollRequest.model_validate(body)
    points, offset = local.scroll(
        _collection(local, name),
        scroll_filter=request.filter,
        limit=request.limit or 10,
        offset=request.offset,
        with_payload=request.with_payload if request.with_payload is not None else True,
        with_vectors=request.with_vector or False,
    )
    return {"points": _dump(points), "next_page_offset": offset}


def _query(local: QdrantClient, body: Any, name: str) -> Any:
    request = models.QueryRequest.model_validate(body)
    return local.query_points(
        _collection(local, name),
        query=request.query,
        using=request.using,
        prefetch=request.prefetch,
        query_filter=request.filter,
        score_threshold=request.score_threshold,
        limit=request.limit or 10,
        with_payload=request.with_payload if request.with_payload is not None else False,
        with_vectors=request.with_vector or False,
    )


def _update_aliases(local: QdrantClient, body: Any) -> bool:
    request = models.ChangeAliasesOperation.model_validate(body)
    return local.update_collection_aliases(request.actions)


_Handler = Callable[..., Any]
_C = r"/collections/([^/]+)"
_ROUTES: dict[tuple[str, str], _Handler] = {
    ("POST", r"/collections/aliases"): _update_aliases,
    ("GET", r"/aliases"): lambda local, body: local.get_aliases(),
    ("GET", _C + "/aliases"): lambda local, body, name: local.get_collection_aliases(name),
    ("GET", _C + "/exists"): lambda local, body, name: {"exists": local.collection_exists(name)},
    ("GET", _C): lambda local, body, name: local.get_collection(_collection(local, name)),
    ("PUT", _C): _create,
    ("DELETE", _C): lambda local, body, name: local.delete_collection(name),
    # Local mode keeps no payload indexes; the call is answered as a server would.
    ("PUT", _C + "/index"): lambda local, body, name: (_collection(local, name), _update())[1],
    ("PUT", _C + "/points"): _upsert,
    ("POST", _C + "/points"): _retrieve,
    ("POST", _C + "/points/delete"): _delete_points,
    ("POST", _C + "/points/count"): _count,
    ("POST", _C + "/points/scroll"): _scroll,
    ("POST", _C + "/points/query"): _query,
}


@contextmanager
def qdrant_standin(*, latency: float = 0.0) -> Iterator[QdrantStandIn]:
    """A running stand-in for a ``with`` block, closed at its end."""
    standin = QdrantStandIn(latency=latency)
    standin.start()
    try:
        yield standin
    finally:
        standin.close()
