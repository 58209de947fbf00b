"""``ragagent reindex`` against a serving replica (issue 24, item 8): the collection is
rebuilt beside the live one and the alias moves at once, while a client keeps searching.

A ``ragagent serve`` process and the ``ragagent reindex`` command, both over the Qdrant
stand-in (tests/fleet/qdrant_standin.py: Qdrant's REST API over qdrant-client's local mode,
not a Qdrant server; its aliases are local mode's), with reads at majority consistency.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import grpc
import pytest
from ragagent.v1 import agent_pb2, agent_pb2_grpc

from tests.fleet.qdrant_standin import qdrant_standin
from tests.helpers import local_embedder
from tests.processes import REPO, clean_env, ingest_documents, server_process

pytestmark = pytest.mark.slow

QUERY = "How does the gantry robot move its arm?"
OLD = {
    f"robots/page-{n}.md": f"# Gantry page {n}\n\nOLDTEXT: the gantry robot moves its arm "
    f"along rail {n} with a belt drive.\n"
    for n in range(6)
}
NEW = {
    path: text.replace("OLDTEXT", "NEWTEXT").replace("belt drive", "lead screw")
    for path, text in OLD.items()
}


def _write(folder: Path, documents: dict[str, str]) -> Path:
    for path, text in documents.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    return folder


class Searcher:
    """Retrieve in a loop on its own thread; each answer reduced to OLD, NEW, MIXED, EMPTY
    or the status name."""

    def __init__(self, target: str) -> None:
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(target,))
        self._thread.start()

    def _run(self, target: str) -> None:
        with grpc.insecure_channel(target) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            while not self._stop.is_set():
                try:
                    reply = stub.Retrieve(
                        agent_pb2.RetrieveRequest(
                            query=QUERY, max_results=5, confidence_threshold=0.0
                        ),
                        timeout=30,
                    )
                except grpc.RpcError as error:
                    self.seen.append(error.code().name)  # type: ignore[attr-defined]
                    continue
                kinds = {
                    "OLD" if "OLDTEXT" in s.content else "NEW" if "NEWTEXT" in s.content else "?"
                    for s in reply.sources
                }
                self.seen.append(kinds.pop() if len(kinds) == 1 else "MIXED" if kinds else "EMPTY")
                time.sleep(0.02)

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(60)
        return self.seen


def _reindex(folder: Path, settings: dict[str, str], *flags: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "reindex", str(folder), "--json", *flags],
        cwd=REPO,
        env=clean_env(**settings),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_reindex_switches_the_live_collection_at_once_while_a_client_searches(
    tmp_path: Path,
) -> None:
    local_embedder()  # skips where the model is not provisioned
    collection = f"reindex_{uuid.uuid4().hex[:8]}"
    new_folder = _write(tmp_path / "new", NEW)
    with qdrant_standin(latency=0.003) as qdrant:
        common = {
            "qdrant_url": qdrant.url,
            "qdrant_collection": collection,
            "qdrant_read_consistency": "majority",
        }
        with server_process(tmp_path / "replica", **common) as server:
            ingest_documents(server.target, OLD)
            searcher = Searcher(server.target)
            try:
                time.sleep(1.0)
                aliases_before = qdrant.calls.count("POST /collections/aliases")
                first = _reindex(new_folder, common | {"data_dir": str(tmp_path / "cli")})
                time.sleep(1.0)
            finally:
                seen = searcher.stop()
            aliases_after = qdrant.calls.count("POST /collections/aliases")
            second = _reindex(
                new_folder, common | {"data_dir": str(tmp_path / "cli")}, "--drop-old"
            )
            after = Searcher(server.target)
            time.sleep(0.5)
            seen_after_second = after.stop()
        collections = {c.name for c in qdrant.local.get_collections().collections}
        reads = list(qdrant.reads)

    assert first["generation"] == f"{collection}_g2"
    assert first["previous"] == f"{collection}_g1"
    assert first["documents"] == len(NEW)
    # Every search answered, from one generation or the other, never a mix or nothing:
    # old answers, then (from the switch on) new ones.
    assert set(seen) <= {"OLD", "NEW"}, seen
    assert seen[0] == "OLD"
    assert seen[-1] == "NEW"
    switched = seen.index("NEW")
    assert set(seen[switched:]) == {"NEW"}, seen
    print(f"{len(seen)} searches during the reindex: {switched} old, then the rest new")
    # One alias request moved both aliases (chunks and records) at once.
    assert aliases_after - aliases_before == 1
    # The old generation stays for a rollback; --drop-old deleted the one before the third.
    assert second["generation"] == f"{collection}_g3"
    assert set(seen_after_second) == {"NEW"}
    assert {f"{collection}_g1", f"{collection}_g3"} <= collections
    assert f"{collection}_g2" not in collections
    assert f"{collection}_g2__documents" not in collections
    # Every search and records read asked a majority of replicas.
    assert reads
    assert {consistency for _, consistency in reads} == {"majority"}, reads[:5]


def test_reindex_needs_a_qdrant_server(tmp_path: Path) -> None:
    folder = _write(tmp_path / "docs", NEW)
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "reindex", str(folder)],
        cwd=REPO,
        env=clean_env(data_dir=str(tmp_path / "data")),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "ragagent ingest PATH --prune" in done.stderr


def test_a_writer_that_arrives_during_a_reindex_waits_and_lands_in_the_new_generation(
    tmp_path: Path,
) -> None:
    """The reindex holds the collection's write lease from before it creates the new
    generation until the alias has moved: a document ingested meanwhile waits, then goes to
    the generation the alias names (the new one), and is neither lost nor mixed in early."""
    local_embedder()  # skips where the model is not provisioned
    collection = f"reindex_{uuid.uuid4().hex[:8]}"
    new_folder = _write(tmp_path / "new", NEW)
    late = {"cranes/late.md": "# Late page\n\nLATETEXT: the tower crane lifts steel beams.\n"}
    with qdrant_standin(latency=0.003) as qdrant:
        common = {"qdrant_url": qdrant.url, "qdrant_collection": collection}
        with server_process(tmp_path / "replica", **common) as server:
            ingest_documents(server.target, OLD)
            reindex = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "reindex", str(new_folder), "--json"],
                cwd=REPO,
                env=clean_env(**common, data_dir=str(tmp_path / "cli")),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            building = f"PUT /collections/{collection}_g2"
            deadline = time.monotonic() + 120
            # Polled: the command runs in another process; the stand-in logs each call.
            while not any(c.startswith(building) for c in qdrant.calls):
                assert reindex.poll() is None, reindex.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the reindex never built its generation"
                time.sleep(0.02)
            ingest_documents(server.target, late)  # waits for the reindex's lease
            written = len(qdrant.calls)
            out, err = reindex.communicate(timeout=300)
            assert reindex.returncode == 0, err[-3000:]
            switched = qdrant.calls.index("POST /collections/aliases")
            with grpc.insecure_channel(server.target) as channel:
                found = agent_pb2_grpc.AgentServiceStub(channel).Retrieve(
                    agent_pb2.RetrieveRequest(query="What does the tower crane lift?"), timeout=30
                )
        counts = {g: qdrant.local.count(f"{collection}_{g}").count for g in ("g1", "g2")}
    report = json.loads(out)
    assert report["generation"] == f"{collection}_g2"
    # The late document was written once the alias had moved, so into the new generation.
    assert switched < written
    assert found.sources[0].document_id == "cranes/late.md"
    # g1 keeps the old pages only (for a rollback); g2 has the new pages and the late one.
    assert counts["g2"] > counts["g1"]
