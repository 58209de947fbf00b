"""Rate and stream limits shared by every replica, kept in Redis.

Without it each replica counts on its own, so a fleet of N admits N times the configured
rate. With ``RAGAGENT_LIMITS_REDIS_URL`` set, a principal's token bucket and its open
stream count live in Redis and every replica takes from the same ones:

- the bucket is one hash per principal, refilled and taken from in one Lua script (atomic
  in Redis, with Redis's own clock, so replicas' clocks do not matter);
- the stream count is one counter per principal, incremented when a stream starts (and
  decremented at once if that went over the limit) and decremented when it ends; it
  expires an hour after its last change, which bounds what a replica killed with streams
  open leaves counted.

Cost: one Redis round trip before each limited call (0.1-0.3 ms on loopback), one more
after each limited stream. When Redis fails or is slower than ``timeout``, the replica
falls back to its own per-replica counting with a WARNING (once per outage) and goes back
to Redis on the next call that succeeds: an outage loosens the limits, it never refuses
calls.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.observability.logging import get_logger

log = get_logger("ragagent.limits")

STREAM_KEY_TTL_S = 3600

# KEYS[1]: the bucket; ARGV: capacity, tokens per second, key TTL (s).
# Returns 0 when a token was taken, else the seconds until one is there (as a string).
_TAKE = """
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) + tonumber(now_parts[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens = tonumber(state[1]) or capacity
local updated = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - updated) * rate)
local wait = 0
if tokens < 1 then
  wait = (1 - tokens) / rate
else
  tokens = tokens - 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'updated', tostring(now))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return tostring(wait)
"""


class SharedUnavailable(Exception):
    """Redis did not answer: the caller counts on its own this time."""


class SharedLimits:
    """The fleet's buckets and stream counts in Redis at ``url``; keys start with ``prefix``."""

    def __init__(self, url: str, *, prefix: str = "ragagent:limits:", timeout: float = 0.25):
        self._redis: Redis = Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        self._prefix = prefix
        self._take = self._redis.register_script(_TAKE)
        self._degraded = False

    def _failed(self, error: BaseException) -> SharedUnavailable:
        if not self._degraded:
            self._degraded = True
            log.warning(
                "the shared limits store (Redis) failed: limits are per replica until it "
                "answers again",
                error=repr(error),
            )
        return SharedUnavailable(str(error))

    def _answered(self) -> None:
        if self._degraded:
            self._degraded = False
            log.info("the shared limits store (Redis) answers again: limits are fleet-wide")

    async def take(self, who: str, *, per_minute: int) -> float:
        """Takes a token from ``who``'s bucket: 0.0, or the seconds until one is there."""
        try:
            wait: Any = await self._take(
                keys=[f"{self._prefix}rate:{who}"], args=[per_minute, per_minute / 60.0, 120]
            )
        except (RedisError, OSError) as error:
            raise self._failed(error) from error
        self._answered()
        return float(wait.decode() if isinstance(wait, bytes) else wait)

    async def open_stream(self, who: str, *, limit: int) -> bool:
        """Counts a stream of ``who`` in; False (and nothing counted) when at ``limit``."""
        key = f"{self._prefix}streams:{who}"
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                pipe.expire(key, STREAM_KEY_TTL_S)
                count, _ = await pipe.execute()
            if int(count) > limit:
                await self._redis.decr(key)
                self._answered()
                return False
        except (RedisError, OSError) as error:
            raise self._failed(error) from error
        self._answered()
        return True

    async def close_stream(self, who: str) -> None:
        try:
            await self._redis.decr(f"{self._prefix}streams:{who}")
        except (RedisError, OSError) as error:
            self._failed(error)

    async def close(self) -> None:
        await self._redis.aclose()
