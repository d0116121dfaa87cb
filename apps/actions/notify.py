"""Wake up result waiters when an action ends, without polling the database.

Embedded mode: in-process waiters (``threading.Event`` per waiting request), signalled from the
process that ended the action. Redis mode: the ender publishes on ``loom:action-ended:<id>`` and
waiters block on a pub/sub subscription with a timeout. ``action_finish``/``action_cancel`` call
``publish_action_ended`` from ``transaction.on_commit``, so a waiter never wakes before the result
is readable.

A waiter must subscribe *before* re-reading the action, then wait only if it is still active:
an end that lands between the read and the wait is then never missed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from django.conf import settings

CHANNEL_PREFIX = "loom:action-ended:"


class Subscription(Protocol):
    def wait(self, timeout: float) -> bool:
        """Block until the action ends or ``timeout`` seconds pass; True if it ended."""
        ...


class Notifier(Protocol):
    def subscribe(self, *action_ids: int) -> contextlib.AbstractContextManager[Subscription]:
        """Wake the subscription when any of ``action_ids`` ends."""
        ...

    def publish(self, action_ids: Iterable[int]) -> None: ...


class _EventSubscription:
    def __init__(self) -> None:
        self.event = threading.Event()

    def wait(self, timeout: float) -> bool:
        return self.event.wait(timeout)


class InProcessNotifier:
    """Waiters in this process; correct when everything that ends actions runs in-process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[int, set[_EventSubscription]] = defaultdict(set)

    @contextlib.contextmanager
    def subscribe(self, *action_ids: int) -> Iterator[Subscription]:
        subscription = _EventSubscription()
        with self._lock:
            for action_id in action_ids:
                self._waiters[action_id].add(subscription)
        try:
            yield subscription
        finally:
            with self._lock:
                for action_id in action_ids:
                    waiters = self._waiters.get(action_id)
                    if waiters is not None:
                        waiters.discard(subscription)
                        if not waiters:
                            del self._waiters[action_id]

    def publish(self, action_ids: Iterable[int]) -> None:
        with self._lock:
            subscriptions = {sub for pk in action_ids for sub in self._waiters.get(pk, ())}
        for subscription in subscriptions:
            subscription.event.set()

    def waiter_count(self) -> int:
        with self._lock:
            return sum(len(waiters) for waiters in self._waiters.values())


class _RedisSubscription:
    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            # Blocks on the socket; subscribe confirmations come back as None.
            message = self.pubsub.get_message(ignore_subscribe_messages=True, timeout=remaining)
            if message is not None and message.get("type") == "message":
                return True
        return False


class RedisNotifier:
    """Pub/sub on one channel per action, so waiters only wake for their own action."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)

    @contextlib.contextmanager
    def subscribe(self, *action_ids: int) -> Iterator[Subscription]:
        pubsub = self.client.pubsub()
        try:
            pubsub.subscribe(*(f"{CHANNEL_PREFIX}{action_id}" for action_id in action_ids))
            yield _RedisSubscription(pubsub)
        finally:
            pubsub.close()

    def publish(self, action_ids: Iterable[int]) -> None:
        with self.client.pipeline(transaction=False) as pipe:
            for action_id in action_ids:
                pipe.publish(f"{CHANNEL_PREFIX}{action_id}", b"ended")
            pipe.execute()


_in_process = InProcessNotifier()
_redis_notifiers: dict[str, RedisNotifier] = {}
_redis_lock = threading.Lock()


def get_notifier() -> Notifier:
    """The notifier of the configured mode: Redis if REDIS_URL is set, else in-process."""
    url: str | None = getattr(settings, "REDIS_URL", None)
    if url is None:
        return _in_process
    with _redis_lock:
        if url not in _redis_notifiers:
            _redis_notifiers[url] = RedisNotifier(url)
        return _redis_notifiers[url]


def publish_action_ended(action_ids: Iterable[int]) -> None:
    ids = list(action_ids)
    if ids:
        get_notifier().publish(ids)
