"""Wake up result waiters when an action ends, without polling the database.

Embedded mode: in-process waiters (``threading.Event`` per waiting request), signalled from the
process that ended the action. Redis mode: the ender publishes the ids on
``<prefix>:actions-ended`` and a listener thread in each waiting process wakes its waiters
(``RedisNotifier``). ``action_cancel`` and the scheduler's store call
``publish_action_ended`` from ``transaction.on_commit``, so a waiter never wakes before the result
is readable.

A waiter must subscribe *before* re-reading the action, then wait only if it is still active:
an end that lands between the read and the wait is then never missed.

An ender that has the ended rows at hand (the scheduler's store: its finishing UPDATE returns
them, ``hot_path.progress_from_row``) publishes them with the ids, as committed; a woken waiter
then answers from them (``Subscription.progress_of``) instead of reading the row again. Ends
published without rows (big batches, cancels, other enders) are read back as before.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from django.conf import settings

from controlplane.redis_client import key_prefix, redis_client
from controlplane.redis_listener import listen

LISTENER_CONNECT_WAIT_S = 2.0
LISTENER_DOWN_POLL_S = 0.5
LISTENER_IDLE_S = 30.0
LISTENER_RETRY_S = 0.5
log = logging.getLogger("loom.notify")


class Subscription(Protocol):
    def wait(self, timeout: float) -> bool:
        """Block until the action ends or ``timeout`` seconds pass; True if it ended."""
        ...

    def wake(self) -> None:
        """End the wait now, as an end would (the waiting client hung up, say)."""
        ...

    def progress_of(self, action_id: int) -> Mapping[str, Any] | None:
        """The row the end of ``action_id`` committed, if its ender published it, else None."""
        ...


Progress = Mapping[int, Mapping[str, Any]]  # action id → its row, ``hot_path.progress_from_row``


class Notifier(Protocol):
    def subscribe(self, *action_ids: int) -> contextlib.AbstractContextManager[Subscription]:
        """Wake the subscription when any of ``action_ids`` ends."""
        ...

    def publish(self, action_ids: Iterable[int], progress: Progress | None = None) -> None: ...


class _EventSubscription:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.progress: dict[int, Mapping[str, Any]] = {}  # written before the event is set

    def wait(self, timeout: float) -> bool:
        return self.event.wait(timeout)

    def wake(self) -> None:
        self.event.set()

    def progress_of(self, action_id: int) -> Mapping[str, Any] | None:
        return self.progress.get(action_id)


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

    def publish(self, action_ids: Iterable[int], progress: Progress | None = None) -> None:
        with self._lock:
            woken = [(pk, sub) for pk in action_ids for sub in self._waiters.get(pk, ())]
        for pk, subscription in woken:
            if progress is not None and pk in progress:
                subscription.progress[pk] = progress[pk]
            subscription.event.set()

    def wake_all(self) -> None:
        with self._lock:
            subscriptions = {sub for waiters in self._waiters.values() for sub in waiters}
        for subscription in subscriptions:
            subscription.event.set()

    def waiter_count(self) -> int:
        with self._lock:
            return sum(len(waiters) for waiters in self._waiters.values())


class _ListenerSubscription:
    def __init__(self, local: Subscription, listening: threading.Event) -> None:
        self.local = local
        self.listening = listening

    def wait(self, timeout: float) -> bool:
        if not self.listening.is_set():
            # No listener connected (Redis is down): wake soon and let the caller re-read the
            # database, instead of sleeping through a wake-up nobody would deliver.
            timeout = min(timeout, LISTENER_DOWN_POLL_S)
        return self.local.wait(timeout)

    def wake(self) -> None:
        self.local.wake()

    def progress_of(self, action_id: int) -> Mapping[str, Any] | None:
        return self.local.progress_of(action_id)


class RedisNotifier:
    """Across processes: enders publish, one listener thread per waiting process wakes waiters.

    An ender publishes the ids of everything one transaction ended as one message on
    ``<prefix>:actions-ended``. Each process that waits keeps one pub/sub connection, subscribed
    for its life by a listener thread, and wakes its local waiters (an ``InProcessNotifier``) of
    those ids — so subscribing costs no Redis round trip and no connection per request. Whenever
    the listener (re)connects it wakes every waiter: each re-reads the database, so an end
    published while nobody listened is never slept through.
    """

    def __init__(self, url: str, channel: str) -> None:
        self.client = redis_client(url)
        self.channel = channel
        self.local = InProcessNotifier()
        self.listening = threading.Event()
        self._listener: threading.Thread | None = None
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def subscribe(self, *action_ids: int) -> Iterator[Subscription]:
        self._ensure_listener()
        with self.local.subscribe(*action_ids) as local:
            yield _ListenerSubscription(local, self.listening)

    def publish(self, action_ids: Iterable[int], progress: Progress | None = None) -> None:
        self.client.publish(self.channel, encode_notice(action_ids, progress))

    def _ensure_listener(self) -> None:
        with self._lock:
            if self._listener is None or not self._listener.is_alive():
                self._listener = threading.Thread(
                    target=self._listen, name="loom-actions-ended", daemon=True
                )
                self._listener.start()
        self.listening.wait(LISTENER_CONNECT_WAIT_S)  # the first waiter of a process only

    def _listen(self) -> None:
        listen(
            lambda: self.client.pubsub(),
            self.channel,
            on_subscribed=self._subscribed,
            on_message=self._message,
            on_lost=self._lost,
            idle_s=lambda: LISTENER_IDLE_S,
        )

    def _subscribed(self) -> None:
        self.listening.set()
        self.local.wake_all()  # whatever ended while nobody listened

    def _message(self, data: bytes) -> None:
        try:
            ids, progress = decode_notice(data)
        except ValueError:
            log.warning("ignored a malformed message on %s", self.channel)
            return
        self.local.publish(ids, progress)

    def _lost(self, error: Exception) -> None:
        self.listening.clear()
        log.warning("action-ended listener lost Redis; reconnecting", exc_info=error)
        time.sleep(LISTENER_RETRY_S)


def encode_notice(action_ids: Iterable[int], progress: Progress | None = None) -> str:
    """``1,2,3`` — or, with rows, ``{"ids": [1, 2, 3], "progress": {"1": {…}}}``."""
    ids = [int(pk) for pk in action_ids]
    if not progress:
        return ",".join(str(pk) for pk in ids)
    rows = {str(pk): dict(row) for pk, row in progress.items()}
    return json.dumps({"ids": ids, "progress": rows}, separators=(",", ":"))


def decode_notice(data: bytes | str) -> tuple[list[int], dict[int, Mapping[str, Any]] | None]:
    """What ``encode_notice`` wrote; ValueError if it is neither form."""
    text = data.decode() if isinstance(data, bytes) else data
    if not text.startswith("{"):
        return [int(part) for part in text.split(",") if part], None
    try:
        notice = json.loads(text)
        ids = [int(pk) for pk in notice["ids"]]
        progress: dict[int, Mapping[str, Any]] = {
            int(pk): row for pk, row in notice["progress"].items() if isinstance(row, dict)
        }
    except (TypeError, KeyError, AttributeError, json.JSONDecodeError) as error:
        raise ValueError(f"malformed notice: {error}") from None
    return ids, progress


_in_process = InProcessNotifier()
_redis_notifiers: dict[tuple[str, str], RedisNotifier] = {}
_redis_lock = threading.Lock()


def get_notifier() -> Notifier:
    """The notifier of the configured mode: Redis if REDIS_URL is set, else in-process."""
    url: str | None = getattr(settings, "REDIS_URL", None)
    if url is None:
        return _in_process
    with _redis_lock:
        channel = f"{key_prefix()}:actions-ended"
        if (url, channel) not in _redis_notifiers:
            _redis_notifiers[url, channel] = RedisNotifier(url, channel)
        return _redis_notifiers[url, channel]


def publish_action_ended(action_ids: Iterable[int], progress: Progress | None = None) -> None:
    ids = list(action_ids)
    if ids:
        get_notifier().publish(ids, progress)
