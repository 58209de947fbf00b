"""Limits for the whole fleet: two replicas sharing a Redis admit one principal's rate
once, not once per replica; a Redis that fails loosens limits to per replica, with a
WARNING, and never refuses calls for it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import grpc
import httpx
import pytest
import structlog
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc

from service.api.interceptors.call import Call
from service.api.interceptors.limits import AuthFailureThrottle, Limit, RateLimits
from service.errors import RateLimited, TooManyStreams
from service.fleet.limits import SharedLimits
from service.security.principal import Principal
from tests.helpers import running_server
from tests.processes import ServerProcess, free_port
from tests.security.support import bearer, new_key

REDIS_URL = "redis://127.0.0.1:6379/0"


def _redis_or_skip() -> None:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=1).ping()
    except redis.RedisError as error:
        pytest.skip(f"Redis is not reachable at {REDIS_URL} ({error!r})")


def _call(who: str, *, streaming: bool = False) -> Call:
    call = Call(method="/ragagent.v1.AgentService/Ask", peer="", metadata=(), streaming=streaming)
    call.principal = Principal(name=who, roles=frozenset(), method="api-key")
    return call


def _five_a_minute(folder: Path, keys: Path, extra: list[dict[str, str]]) -> list[ServerProcess]:
    """One serving replica per ``extra`` (its own settings), all at five calls a minute per
    principal, counted in one Redis under a prefix of their own."""
    prefix = f"test:{uuid.uuid4().hex}:"
    replicas = [
        ServerProcess.launch(
            folder / f"replica-{i}",
            api_keys_file=str(keys),
            rate_limit_requests_per_minute="5",
            limits_redis_url=REDIS_URL,
            limits_redis_prefix=prefix,
            **settings,
        )
        for i, settings in enumerate(extra)
    ]
    try:
        for replica in replicas:
            replica.wait_ready()
    except BaseException:
        for replica in replicas:
            replica.stop()
        raise
    return replicas


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_five_a_minute_across_two_replicas_admits_exactly_five(tmp_path: Path) -> None:
    _redis_or_skip()
    keys = tmp_path / "keys.jsonl"
    _, alice = new_key(keys, "alice", "corpus:read")
    replicas = _five_a_minute(tmp_path, keys, [{}, {}])
    try:
        outcomes = []
        for n in range(10):
            with grpc.insecure_channel(replicas[n % 2].target) as channel:
                try:
                    corpus_pb2_grpc.CorpusServiceStub(channel).GetCorpusStats(
                        corpus_pb2.GetCorpusStatsRequest(), metadata=bearer(alice), timeout=10
                    )
                    outcomes.append("OK")
                except grpc.RpcError as error:
                    outcomes.append(error.code().name)
    finally:
        for replica in replicas:
            replica.stop()
    assert outcomes.count("OK") == 5, outcomes
    assert outcomes.count("RESOURCE_EXHAUSTED") == 5, outcomes


async def test_streams_are_counted_for_the_fleet_and_given_back() -> None:
    _redis_or_skip()
    prefix = f"test:{uuid.uuid4().hex}:"
    first = SharedLimits(REDIS_URL, prefix=prefix)
    second = SharedLimits(REDIS_URL, prefix=prefix)
    one = Limit(RateLimits(requests_per_minute=100, concurrent_streams=1), shared=first)
    two = Limit(RateLimits(requests_per_minute=100, concurrent_streams=1), shared=second)
    try:
        stream = _call("alice", streaming=True)
        await one.admit(stream)
        with pytest.raises(TooManyStreams):
            await two.admit(_call("alice", streaming=True))  # the other replica's slot
        one.end(stream, grpc.StatusCode.OK)
        await asyncio.gather(*one._closing)
        await two.admit(_call("alice", streaming=True))
    finally:
        await first.close()
        await second.close()


async def test_a_redis_outage_falls_back_to_per_replica_limits_with_a_warning() -> None:
    dead = SharedLimits(f"redis://127.0.0.1:{free_port()}/0", timeout=0.2)
    limit = Limit(RateLimits(requests_per_minute=2), shared=dead)
    try:
        with structlog.testing.capture_logs() as logs:
            await limit.admit(_call("alice"))
            await limit.admit(_call("alice"))
            with pytest.raises(RateLimited):  # the replica's own bucket, not a refusal for all
                await limit.admit(_call("alice"))
    finally:
        await dead.close()
    warnings = [line for line in logs if line["log_level"] == "warning"]
    assert len(warnings) == 1  # once per outage
    assert "per replica" in warnings[0]["event"]


async def test_failed_authentications_are_throttled_per_peer(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    _, alice = new_key(keys, "alice", "corpus:read")
    async with running_server(
        tmp_path / "data", api_keys_file=keys, auth_failures_per_minute=10
    ) as srv:
        stub = corpus_pb2_grpc.CorpusServiceStub(srv.channel)

        async def stats(credential: str) -> str:
            try:
                await stub.GetCorpusStats(
                    corpus_pb2.GetCorpusStatsRequest(), metadata=bearer(credential), timeout=10
                )
            except grpc.aio.AioRpcError as error:
                return error.code().name
            return "OK"

        guesses = [await stats(f"rag_wrong{n}") for n in range(300)]
        meanwhile = await stats(alice)  # the same address: refused unchecked too
    assert guesses.count("UNAUTHENTICATED") == 10
    assert guesses.count("RESOURCE_EXHAUSTED") == 290
    assert meanwhile == "RESOURCE_EXHAUSTED"


def test_the_throttle_counts_failures_only_and_refills() -> None:
    now = [0.0]
    throttle = AuthFailureThrottle(2, clock=lambda: now[0])
    bad = _call("x")
    bad.peer = "ipv4:10.0.0.7:5555"
    for _ in range(2):
        throttle.start(bad)
        throttle.end(bad, grpc.StatusCode.UNAUTHENTICATED)
    other = _call("y")
    other.peer = "ipv4:10.0.0.8:5555"
    throttle.start(other)  # another address is not affected
    bad.peer = "ipv4:10.0.0.7:6000"  # another port, same address: refused
    with pytest.raises(RateLimited):
        throttle.start(bad)
    now[0] += 30.0  # 2 a minute: one back after 30 s
    throttle.start(bad)
    throttle.end(bad, grpc.StatusCode.OK)  # successes cost nothing
    throttle.start(bad)


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_http_calls_count_against_the_same_fleet_rate_as_grpc_calls(tmp_path: Path) -> None:
    """The HTTP listener starts calls through the same layers, the shared store's admission
    included: five a minute admit five, whichever transport and replica the calls take."""
    _redis_or_skip()
    keys = tmp_path / "keys.jsonl"
    _, alice = new_key(keys, "alice", "corpus:read")
    http_ports = [free_port(), free_port()]
    extra = [{"http_address": f"127.0.0.1:{port}"} for port in http_ports]
    replicas = _five_a_minute(tmp_path, keys, extra)
    try:
        outcomes = []
        for n in range(10):
            reply = httpx.post(
                f"http://127.0.0.1:{http_ports[n % 2]}/ragagent.v1.CorpusService/GetCorpusStats",
                json={},
                headers=dict(bearer(alice)),
                timeout=10,
            )
            outcomes.append(reply.json().get("code", "ok") if reply.status_code != 200 else "ok")
    finally:
        for replica in replicas:
            replica.stop()
    assert outcomes.count("ok") == 5, outcomes
    assert outcomes.count("resource_exhausted") == 5, outcomes
