"""Limits per principal: requests per minute and concurrent streams, refused with
RESOURCE_EXHAUSTED and a RetryInfo that says when the next call would be admitted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
from ragagent.v1 import corpus_pb2, corpus_pb2_grpc

from service.api.interceptors.call import Call
from service.api.interceptors.limits import Limit, RateLimits
from service.errors import RateLimited, TooManyStreams
from service.security.principal import Principal
from tests.helpers import running_server
from tests.security.support import EVERY_RPC, bearer, new_key, outcome, reason, retry_delay_s


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _call(who: str, *, streaming: bool = False) -> Call:
    call = Call(method="/ragagent.v1.AgentService/Ask", peer="", metadata=(), streaming=streaming)
    call.principal = Principal(name=who, roles=frozenset(), method="api-key")
    return call


def test_a_bucket_admits_a_minute_of_requests_then_refills_at_the_rate() -> None:
    clock = Clock()
    limit = Limit(RateLimits(requests_per_minute=60), clock=clock)
    for _ in range(60):
        limit.start(_call("alice"))
    with pytest.raises(RateLimited) as refused:
        limit.start(_call("alice"))
    assert refused.value.retry_after_s == pytest.approx(1.0, abs=0.01)
    limit.start(_call("bob"))  # one caller's bucket is not another's
    clock.now += 0.5
    with pytest.raises(RateLimited) as again:
        limit.start(_call("alice"))
    assert again.value.retry_after_s == pytest.approx(0.5, abs=0.01)
    clock.now += 0.5
    limit.start(_call("alice"))


def test_memory_stays_bounded_however_many_principals_call() -> None:
    limit = Limit(RateLimits(requests_per_minute=10, max_principals=100), clock=Clock())
    for i in range(10_000):
        limit.start(_call(f"caller-{i}"))
    assert len(limit._buckets) == 100


def test_stream_slots_are_given_back_when_calls_end_however_they_end() -> None:
    limit = Limit(RateLimits(concurrent_streams=2), clock=Clock())
    first, second = _call("alice", streaming=True), _call("alice", streaming=True)
    limit.start(first)
    limit.start(second)
    with pytest.raises(TooManyStreams):
        limit.start(_call("alice", streaming=True))
    limit.start(_call("alice"))  # a unary call is no stream
    limit.end(first, grpc.StatusCode.CANCELLED)
    limit.end(first, grpc.StatusCode.CANCELLED)  # ended twice: given back once
    third = _call("alice", streaming=True)
    limit.start(third)
    with pytest.raises(TooManyStreams):
        limit.start(_call("alice", streaming=True))
    limit.end(second, grpc.StatusCode.OK)
    limit.end(third, grpc.StatusCode.INTERNAL)
    limit.end(_call("alice", streaming=True), grpc.StatusCode.UNAUTHENTICATED)  # never started
    assert limit._streams == {}


async def test_the_server_refuses_past_the_rate_with_retry_info(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    _, alice = new_key(keys, "alice", "corpus:read")
    _, bob = new_key(keys, "bob", "corpus:read")
    _, stats = EVERY_RPC["GetCorpusStats"]
    async with running_server(
        tmp_path / "data", api_keys_file=keys, rate_limit_requests_per_minute=3
    ) as srv:
        admitted = [await outcome(stats, srv.channel, bearer(alice)) for _ in range(3)]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await corpus_pb2_grpc.CorpusServiceStub(srv.channel).GetCorpusStats(
                corpus_pb2.GetCorpusStatsRequest(), metadata=bearer(alice)
            )
        others = await outcome(stats, srv.channel, bearer(bob))
        health = [await outcome(EVERY_RPC["Health"][1], srv.channel, ()) for _ in range(5)]
    assert admitted == ["OK"] * 3
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert reason(refused.value) == "RATE_LIMITED"
    delay = retry_delay_s(refused.value)
    assert delay is not None
    assert 19.0 < delay <= 20.0  # 3 a minute: the next token in 20 s
    assert others == "OK"
    assert health == ["OK"] * 5  # probes are never limited


async def test_the_server_limits_open_streams_per_principal(tmp_path: Path) -> None:
    keys = tmp_path / "keys.jsonl"
    _, writer = new_key(keys, "writer", "corpus:write", "ask")
    _, other = new_key(keys, "other", "ask")
    _, ask_stream = EVERY_RPC["AskStream"]
    _, ask = EVERY_RPC["Ask"]
    async with running_server(
        tmp_path / "data", api_keys_file=keys, rate_limit_concurrent_streams=1
    ) as srv:
        held_open = asyncio.Event()
        finish = asyncio.Event()

        async def requests() -> Any:
            held_open.set()
            await finish.wait()
            for _ in ():
                yield corpus_pb2.IngestDocumentsRequest()

        ingest = corpus_pb2_grpc.CorpusServiceStub(srv.channel).IngestDocuments(
            requests(), metadata=bearer(writer)
        )
        await held_open.wait()
        await asyncio.sleep(0.3)  # the server has started the call
        second_stream = await outcome(ask_stream, srv.channel, bearer(writer))
        unary = await outcome(ask, srv.channel, bearer(writer))
        someone_else = await outcome(ask_stream, srv.channel, bearer(other))
        finish.set()
        await ingest
        after = await outcome(ask_stream, srv.channel, bearer(writer))
    assert second_stream == "RESOURCE_EXHAUSTED/TOO_MANY_STREAMS"
    assert unary == "OK"
    assert someone_else == "OK"
    assert after == "OK"
