"""Replicas started at once over one Qdrant: the losers of the creation race and the 5xx a
cluster answers while shards initialise still end SERVING."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from qdrant_client import AsyncQdrantClient

from service.fleet.lease import corpus_lease
from service.retrieval.qdrant_store import QdrantStore
from tests.fleet.qdrant_standin import qdrant_standin
from tests.fleet.support import launch_replicas, postgres_role, wait_all_ready
from tests.ingest.fakes import FakeEmbedder


@pytest.mark.slow
def test_three_replicas_started_at_once_all_serve_through_409_and_503(tmp_path: Path) -> None:
    collection = f"fleet_{uuid.uuid4().hex[:8]}"
    first = f"{collection}_g1"  # generation 1, behind the alias (qdrant_aliases)
    with qdrant_standin(latency=0.005) as qdrant, postgres_role() as dsn:
        # Every creation answers 503 twice, then the race decides: one 200, the others 409.
        qdrant.inject(rf"^PUT /collections/{first}$", 503, times=2)
        qdrant.inject(rf"^PUT /collections/{first}__documents$", 503, times=2)
        qdrant.inject(rf"^PUT /collections/{first}/index$", 502, times=2)
        # And one replica's creation of the records collection loses with a 409 outright.
        qdrant.inject(rf"^PUT /collections/{first}__documents$", 409, times=1)
        # Pointing the aliases fails once while the cluster elects a leader.
        qdrant.inject(r"^POST /collections/aliases$", 503, times=1)
        started = time.monotonic()
        replicas = launch_replicas(
            tmp_path, 3, qdrant_url=qdrant.url, database_url=dsn, qdrant_collection=collection
        )
        try:
            wait_all_ready(replicas, 90.0)
            took = time.monotonic() - started
            assert all(r.alive() for r in replicas)
        finally:
            for replica in replicas:
                replica.stop()
        creates = [c for c in qdrant.calls if c == f"PUT /collections/{first}"]
        assert qdrant.answered.get(503, 0) == 5
        assert qdrant.answered.get(502, 0) == 2
        assert qdrant.answered.get(409, 0) >= 1
        assert len(creates) >= 3, creates
        assert qdrant.local.collection_exists(collection)
        assert qdrant.local.collection_exists(f"{collection}__documents")
        named = {a.alias_name: a.collection_name for a in qdrant.local.get_aliases().aliases}
        assert named == {collection: first, f"{collection}__documents": f"{first}__documents"}
        print(f"3 replicas SERVING in {took:.1f} s")


async def _create_with(url: str, collection: str, cluster: dict[str, int]) -> None:
    client = AsyncQdrantClient(url=url, check_compatibility=False)
    store = QdrantStore(client, FakeEmbedder(), collection=collection, cluster=cluster)
    try:
        await store.ensure_collection()
        async with corpus_lease(store, ttl=5, wait=5).hold(None):
            pass
    finally:
        await client.close()


def test_cluster_settings_are_applied_to_every_collection_created() -> None:
    collection = f"fleet_{uuid.uuid4().hex[:8]}"
    cluster = {"shard_number": 3, "replication_factor": 2, "write_consistency_factor": 2}
    with qdrant_standin() as qdrant:
        asyncio.run(_create_with(qdrant.url, collection, cluster))
    made = {name: qdrant.created[name] for name in qdrant.created}
    # The collection and its records are generation 1 behind aliases (qdrant_aliases).
    first = f"{collection}_g1"
    assert set(made) == {first, f"{first}__documents", f"{collection}__leases"}
    for body in made.values():
        assert {k: body.get(k) for k in cluster} == cluster


def test_aliases_to_a_collection_not_yet_visible_are_pointed_once_it_is() -> None:
    """A replica whose creation of a collection got 409 may point the aliases before the
    replica that creates it has finished (or before a cluster's peer applied it): Qdrant
    answers 404 for a moment, which the set-up retries like a 5xx instead of failing."""
    collection = f"fleet_{uuid.uuid4().hex[:8]}"
    first = f"{collection}_g1"
    with qdrant_standin() as qdrant:
        qdrant.inject(r"^POST /collections/aliases$", 404, times=2)
        asyncio.run(_create_with(qdrant.url, collection, {}))
        named = {a.alias_name: a.collection_name for a in qdrant.local.get_aliases().aliases}
    assert qdrant.answered.get(404, 0) == 2
    assert named == {collection: first, f"{collection}__documents": f"{first}__documents"}
