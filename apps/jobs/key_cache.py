"""Verified bearer keys, cached per process, dropped the moment anything they depend on changes.

Every API request authenticates its key with one SELECT of the key, its job and its user
(``authentication._key_row``); with this cache a key's next request costs a dict lookup instead.
A cached row stays right only while the key, its job and its user stay as they were, so:

- every write that can change an answer calls ``auth_changed()`` (the model signals connected in
  ``apps.jobs.apps``, ``services.api_key_revoke``): it clears this process's cache at once and
  again after the commit, and in Redis mode publishes on ``<prefix>:auth-changed``, where a
  listener thread in every process clears that process's cache;
- in Redis mode a process uses its cache only while its listener is subscribed: a process that
  cannot hear invalidations reads the database on every request and stores nothing;
- an entry lives ``KEY_CACHE_TTL_S`` at most: the backstop for writes made outside Django (psql,
  raw SQL), which announce nothing.

Only keys that authenticated are cached; unknown, revoked and refused keys always go to the
database. A read that a clear overtook (the clear bumps ``generation``) is not stored, so a row
read before a change never outlives the invalidation of that change.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, NamedTuple

import redis
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, transaction

from controlplane.redis_client import key_prefix, redis_client
from controlplane.redis_listener import listen

if TYPE_CHECKING:
    from apps.jobs.authentication import _KeyRow

KEY_CACHE_TTL_S = 10.0
KEY_CACHE_MAX_ENTRIES = 10_000
LISTENER_IDLE_S = 1.0  # how often the thread looks up from its socket (to notice close())
LISTENER_RETRY_S = 0.5
log = logging.getLogger("loom.auth")

_clock = time.monotonic  # tests move it forward to expire entries


class Ticket(NamedTuple):
    """Taken before a database read: the read may be stored only if no clear came after it."""

    generation: int
    read_at: float


class _Entries:
    """The cache proper: key hash → (row, when its read began)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: dict[str, tuple[_KeyRow, float]] = {}
        self.generation = 0  # bumped by every clear

    def get(self, key_hash: str) -> _KeyRow | None:
        with self.lock:
            entry = self.rows.get(key_hash)
        if entry is None or _clock() - entry[1] >= KEY_CACHE_TTL_S:
            return None
        return entry[0]

    def ticket(self) -> Ticket:
        with self.lock:
            return Ticket(self.generation, _clock())

    def put(self, key_hash: str, row: _KeyRow, ticket: Ticket) -> None:
        with self.lock:
            if ticket.generation != self.generation:
                return  # something changed during the read: the row may predate it
            if len(self.rows) >= KEY_CACHE_MAX_ENTRIES:
                self.rows.clear()  # crude but bounded; the next requests refill it
            self.rows[key_hash] = (row, ticket.read_at)

    def clear(self) -> None:
        with self.lock:
            self.rows.clear()
            self.generation += 1

    def __len__(self) -> int:
        return len(self.rows)


_entries = _Entries()


class Listener:
    """One thread per process, subscribed to ``channel``: any message clears the cache.

    ``listening`` is set only while subscribed; whenever it (re)subscribes it clears the cache,
    since whatever was published while it was away went unheard. On a Redis error it clears
    ``listening`` and the cache, waits ``LISTENER_RETRY_S`` and reconnects (as
    ``apps.actions.notify.RedisNotifier`` does).
    """

    def __init__(self, url: str, channel: str) -> None:
        self.client = redis_client(url)
        self.channel = channel
        self.listening = threading.Event()
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._listen, name="loom-auth-changed", daemon=True)

    def close(self) -> None:
        """Stop using the cache now; the thread ends within ``LISTENER_IDLE_S``."""
        self.closing.set()
        self.listening.clear()

    def _listen(self) -> None:
        try:
            listen(
                lambda: self.client.pubsub(),
                self.channel,
                on_subscribed=self._subscribed,
                on_message=lambda _: _entries.clear(),
                on_lost=self._lost,
                idle_s=lambda: LISTENER_IDLE_S,
                keep_going=lambda: not self.closing.is_set(),
            )
        finally:  # whatever ended the thread, the cache must not be trusted without it
            self.listening.clear()
            _entries.clear()

    def _subscribed(self) -> None:
        _entries.clear()
        self.listening.set()

    def _lost(self, error: Exception) -> None:
        self.listening.clear()
        _entries.clear()
        log.warning("auth-changed listener lost Redis; reconnecting", exc_info=error)
        self.closing.wait(LISTENER_RETRY_S)


_listeners: dict[tuple[str, str], Listener] = {}
_listeners_lock = threading.Lock()
_listeners_pid = os.getpid()


def channel() -> str:
    return f"{key_prefix()}:auth-changed"


def listener(url: str) -> Listener:
    """This process's listener for ``url`` and the configured prefix, started if need be."""
    global _listeners_pid
    name = channel()
    current = _listeners.get((url, name))
    if current is not None and _listeners_pid == os.getpid() and current.listening.is_set():
        return current  # the per-request path: no lock
    with _listeners_lock:
        if _listeners_pid != os.getpid():
            # Forked: the parent's listener threads did not come along, nor may its rows stay.
            _listeners.clear()
            _entries.clear()
            _listeners_pid = os.getpid()
        current = _listeners.get((url, name))
        if current is None or current.closing.is_set() or not current.thread.is_alive():
            current = _listeners[url, name] = Listener(url, name)
            current.thread.start()
        return current


def usable() -> bool:
    """Whether this process may trust its cache: always embedded, while listening with Redis."""
    url: str | None = getattr(settings, "REDIS_URL", None)
    return url is None or listener(url).listening.is_set()


def get(key_hash: str) -> _KeyRow | None:
    """The cached row of a key that authenticated less than ``KEY_CACHE_TTL_S`` ago, else None."""
    return _entries.get(key_hash) if usable() else None


def ticket() -> Ticket | None:
    """Take before reading a key from the database; None when the cache is not to be used."""
    taken = _entries.ticket()  # before the check: a listener dropping after it voids the ticket
    return taken if usable() else None


def put(key_hash: str, row: _KeyRow, ticket: Ticket | None) -> None:
    """Cache the row of a key that authenticated, unless a clear came after ``ticket``."""
    if ticket is not None:
        _entries.put(key_hash, row, ticket)


def clear() -> None:
    """Drop this process's cached rows (and void every read in flight)."""
    _entries.clear()


def size() -> int:
    return len(_entries)


def auth_changed(using: str = DEFAULT_DB_ALIAS) -> None:
    """A key, job or user changed: clear now, and after the commit clear and tell every process.

    Clearing before the commit matters too: a request of this process right after the write
    must see it (and tests run in transactions that never commit). Clearing after it catches a
    read that raced the uncommitted write.
    """
    clear()
    transaction.on_commit(_committed, using=using)


@functools.cache
def _publisher(url: str) -> redis.Redis:
    """One client (and connection pool) per URL for this process's announcements."""
    return redis_client(url)


def _committed() -> None:
    clear()
    url: str | None = getattr(settings, "REDIS_URL", None)
    if url is None:
        return
    try:
        _publisher(url).publish(channel(), b"1")
    except redis.RedisError:
        # The write is committed; other processes drop the row within KEY_CACHE_TTL_S, and a
        # Redis that refuses this publish has most likely unsubscribed their listeners already.
        log.warning("could not publish an auth change; caches expire it", exc_info=True)
