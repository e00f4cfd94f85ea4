"""The Redis clients of the stores, with every Redis error mapped where it enters: they raise
`StoreUnavailable` (Redis did not answer) or `StoreError` (Redis answered with an error), never
a redis-py exception. Build a backend's clients from these classes (`client_for`,
`sync_client`, or `AsyncStoreRedis.from_url` in tests), never from redis-py's own.

Every command of the Redis stores goes through one of two client classes, asynchronous (the bus)
or synchronous (the stores the agent calls), and through their pipelines; the mapping sits at
their single entry points, so no store has to wrap its calls and nothing above
`soulflow/backends/` ever names a redis exception. Two errors pass through unmapped, because
redis-py handles them itself one level up: `NoScriptError` (a registered script reloads and
runs again) and `WatchError` (`transaction()` runs its function again). A `StoreUnavailable`
keeps the Redis error as its cause and its text as its message, so logs read as before.
"""

from __future__ import annotations

from typing import Any

from redis import Redis as SyncRedis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.client import Pipeline as AsyncPipeline
from redis.client import Pipeline as SyncPipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError

from soulflow.backends.redis.connections import lean_connection_class
from soulflow.errors import StoreError, StoreUnavailable

__all__ = ["AsyncStoreRedis", "SyncStoreRedis", "mapped"]

# handled by redis-py above the call that raised them (see the module docstring)
_PASSED_ON = (NoScriptError, WatchError)


def mapped(exc: RedisError) -> StoreError:
    """The store error for a Redis error: a connection failure, a timeout, a Redis still
    loading its data (a connection error to redis-py) or the sync client's breaker are the
    store being away; anything else is a refusal."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return StoreUnavailable(text)
    return StoreError(text)


class AsyncStoreRedis(AsyncRedis):
    """The asynchronous client of the bus's stores (built by `client_for`)."""

    @classmethod
    def from_url(cls, url: str, single_connection_client: bool = False,
                 auto_close_connection_pool: bool | None = None,
                 **kwargs: Any) -> AsyncStoreRedis:
        """redis-py's client for `url`, on connections whose writes cost no task of their
        own (`connections.py`)."""
        client = super().from_url(url, single_connection_client, auto_close_connection_pool,
                                  **kwargs)
        pool = client.connection_pool
        pool.connection_class = lean_connection_class(pool.connection_class)
        return client  # type: ignore[return-value]

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return await super().execute_command(*args, **options)
        except _PASSED_ON:
            raise
        except RedisError as exc:
            raise mapped(exc) from exc

    def pipeline(self, transaction: bool = True,
                 shard_hint: str | None = None) -> _AsyncStorePipeline:
        return _AsyncStorePipeline(self.connection_pool, self.response_callbacks, transaction,
                                   shard_hint)


class _AsyncStorePipeline(AsyncPipeline):
    async def immediate_execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return await super().immediate_execute_command(*args, **options)
        except WatchError:
            raise
        except RedisError as exc:
            raise mapped(exc) from exc

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error)
        except WatchError:
            raise
        except RedisError as exc:
            raise mapped(exc) from exc


class SyncStoreRedis(SyncRedis):
    """The synchronous client of the stores the agent calls (built by `sync_client`)."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)
        except _PASSED_ON:
            raise
        except RedisError as exc:
            raise mapped(exc) from exc

    def pipeline(self, transaction: bool = True,
                 shard_hint: str | None = None) -> _SyncStorePipeline:
        return _SyncStorePipeline(self.connection_pool, self.response_callbacks, transaction,
                                  shard_hint)


class _SyncStorePipeline(SyncPipeline):
    def immediate_execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().immediate_execute_command(*args, **options)
        except WatchError:
            raise
        except RedisError as exc:
            raise mapped(exc) from exc

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return super().execute(raise_on_error)
        except WatchError:
            raise
        except RedisError as exc:
            raise mapped(exc) from exc
