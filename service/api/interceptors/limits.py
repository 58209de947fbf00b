"""Limits per principal: requests per minute (a token bucket) and concurrent streams.

A bucket holds up to a minute's requests and refills continuously, so a caller may burst
and then goes at the configured rate. Buckets live in a least-recently-used map of bounded
size: a bucket evicted was the one idle longest, most likely full again anyway, so memory
stays bounded without letting anyone past their rate in practice. Stream counts exist only
while a principal has streams open.

With a shared store (``shared``, Redis: service.fleet.limits) the buckets and stream counts
are the fleet's, checked in :meth:`Limit.admit` (the chain awaits it after ``start``);
when the store fails, that call is counted here, per replica, as without one.

Refusals are RESOURCE_EXHAUSTED with RetryInfo saying when a request would be admitted.
Health checks and reflection are not limited: probes must not be starved by traffic.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from google.protobuf.message import Message

from service.api.interceptors.authn import is_open
from service.api.interceptors.call import Call
from service.errors import RateLimited, TooManyStreams
from service.fleet.limits import SharedLimits, SharedUnavailable

STREAM_RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class RateLimits:
    requests_per_minute: int = 0  # 0 = no limit
    concurrent_streams: int = 0  # 0 = no limit
    max_principals: int = 10_000  # buckets kept at most

    @property
    def enabled(self) -> bool:
        return self.requests_per_minute > 0 or self.concurrent_streams > 0


class _Bucket:
    __slots__ = ("tokens", "updated")

    def __init__(self, tokens: float, updated: float) -> None:
        self.tokens = tokens
        self.updated = updated


class Limit:
    """The chain's rate-limit layer; runs after authentication (it counts per principal)."""

    def __init__(
        self,
        limits: RateLimits,
        *,
        clock: Callable[[], float] = time.monotonic,
        shared: SharedLimits | None = None,
    ) -> None:
        self._limits = limits
        self._shared = shared if limits.enabled else None
        self._shared_slots: set[int] = set()  # calls whose stream Redis counted
        self._closing: set[asyncio.Task[None]] = set()
        self._clock = clock
        self._capacity = float(limits.requests_per_minute)
        self._per_second = limits.requests_per_minute / 60.0
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._streams: dict[str, int] = {}

    def start(self, call: Call) -> None:
        if self._shared is None:
            self._start_here(call)

    async def admit(self, call: Call) -> None:
        """The fleet-wide check (with a shared store); per replica if the store fails."""
        shared = self._shared
        if shared is None or is_open(call.method) or call.principal is None:
            return
        who = call.principal.name
        limit = self._limits.concurrent_streams
        try:
            counted = False
            if call.streaming and limit:
                if not await shared.open_stream(who, limit=limit):
                    raise _too_many(limit)
                counted = True
            try:
                wait = await shared.take(who, per_minute=self._limits.requests_per_minute)
            except BaseException:
                if counted:
                    await shared.close_stream(who)
                raise
        except SharedUnavailable:
            self._start_here(call)
            return
        if wait > 0:
            if counted:
                await shared.close_stream(who)
            raise RateLimited(
                f"at most {self._limits.requests_per_minute} requests per minute per caller "
                "(across all replicas)",
                retry_after_s=round(wait + 0.0005, 3),
            )
        if counted:
            self._shared_slots.add(id(call))

    def _start_here(self, call: Call) -> None:
        if is_open(call.method) or call.principal is None:
            return
        who = call.principal.name
        limit = self._limits.concurrent_streams
        streams = self._streams.get(who, 0)
        if call.streaming and limit and streams >= limit:
            raise _too_many(limit)
        if self._capacity:
            self._take(who)
        if call.streaming and limit:
            self._streams[who] = streams + 1
            call.stream_slot = who

    def _take(self, who: str) -> None:  # per replica
        now = self._clock()
        bucket = self._buckets.get(who)
        if bucket is None:
            bucket = self._buckets[who] = _Bucket(self._capacity, now)
            if len(self._buckets) > self._limits.max_principals:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(who)
            elapsed = max(0.0, now - bucket.updated)
            bucket.tokens = min(self._capacity, bucket.tokens + elapsed * self._per_second)
            bucket.updated = now
        if bucket.tokens < 1.0:
            wait = (1.0 - bucket.tokens) / self._per_second
            raise RateLimited(
                f"at most {self._limits.requests_per_minute} requests per minute per caller",
                retry_after_s=round(wait + 0.0005, 3),
            )
        bucket.tokens -= 1.0

    def message(self, call: Call, message: Message, index: int | None) -> None:
        return None

    def end(self, call: Call, code: grpc.StatusCode) -> None:
        if self._shared is not None and id(call) in self._shared_slots:
            self._shared_slots.discard(id(call))
            assert call.principal is not None  # only counted for a principal
            # Owned here until done; a failure is logged by SharedLimits.
            task = asyncio.get_running_loop().create_task(
                self._shared.close_stream(call.principal.name)
            )
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
            return
        who, call.stream_slot = call.stream_slot, None
        if who is None:
            return
        left = self._streams.get(who, 1) - 1
        if left > 0:
            self._streams[who] = left
        else:
            self._streams.pop(who, None)


def _too_many(limit: int) -> TooManyStreams:
    return TooManyStreams(
        f"at most {limit} streams may be open at once per caller",
        retry_after_s=STREAM_RETRY_S,
    )


def peer_host(peer: str) -> str:
    """The address of grpc's peer string without its port ("ipv4:10.0.0.7:51234" ->
    "ipv4:10.0.0.7", "ipv6:[::1]:5" -> "ipv6:[::1]"); a unix socket's is kept whole."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rsplit(":", 1)[0]
    return peer


class AuthFailureThrottle:
    """Failed authentications per peer address: after ``per_minute`` of them (a bucket
    holding a minute's worth, refilled at that rate) a peer's calls are refused with
    RESOURCE_EXHAUSTED before their credentials are even checked, so guessing keys costs
    time. Runs before authentication; counts in this replica (a guesser spread over N
    replicas gets N times the rate). Buckets are bounded like :class:`Limit`'s."""

    def __init__(
        self,
        per_minute: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_peers: int = 10_000,
    ) -> None:
        self._capacity = float(per_minute)
        self._per_second = per_minute / 60.0
        self._clock = clock
        self._max_peers = max_peers
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def _refilled(self, peer: str) -> _Bucket | None:
        bucket = self._buckets.get(peer)
        if bucket is not None:
            now = self._clock()
            elapsed = max(0.0, now - bucket.updated)
            bucket.tokens = min(self._capacity, bucket.tokens + elapsed * self._per_second)
            bucket.updated = now
        return bucket

    def start(self, call: Call) -> None:
        if not self._capacity or is_open(call.method):
            return
        bucket = self._refilled(peer_host(call.peer))
        if bucket is not None and bucket.tokens < 1.0:
            raise RateLimited(
                f"too many failed authentications from this address (at most "
                f"{self._capacity:g} a minute); fix the credentials and retry later",
                retry_after_s=round((1.0 - bucket.tokens) / self._per_second + 0.0005, 3),
            )

    def message(self, call: Call, message: Message, index: int | None) -> None:
        return None

    def end(self, call: Call, code: grpc.StatusCode) -> None:
        if not self._capacity or code != grpc.StatusCode.UNAUTHENTICATED:
            return
        peer = peer_host(call.peer)
        bucket = self._refilled(peer)
        if bucket is None:
            bucket = self._buckets[peer] = _Bucket(self._capacity, self._clock())
            if len(self._buckets) > self._max_peers:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(peer)
        bucket.tokens = max(0.0, bucket.tokens - 1.0)
