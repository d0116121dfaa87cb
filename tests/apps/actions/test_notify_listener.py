"""``RedisNotifier``: one listener thread per notifier wakes this process's waiters of the ids an
ender publishes; subscribing costs no Redis round trip; without a listener a wait is capped so
the caller re-reads the database; a (re)connect wakes every waiter."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
import redis

from apps.actions import notify

pytestmark = pytest.mark.timeout(60)


def _channel() -> str:
    return f"loomtest-{uuid.uuid4().hex[:12]}:actions-ended"


@pytest.fixture
def notifier(redis_url: str) -> notify.RedisNotifier:
    """A fresh notifier on a channel of its own, its listener connected, its connect-time
    wake-up of every waiter already past (so a wake-up below is for a published id)."""
    fresh = notify.RedisNotifier(redis_url, _channel())
    with fresh.subscribe(0):
        pass
    assert fresh.listening.is_set()
    time.sleep(0.05)
    return fresh


class Waiter(threading.Thread):
    """A request thread waiting for its actions: subscribe, then wait until woken."""

    def __init__(self, notifier: notify.RedisNotifier, *action_ids: int, timeout: float = 10):
        super().__init__(daemon=True)
        self.notifier = notifier
        self.action_ids = action_ids
        self.timeout = timeout
        self.subscribed = threading.Event()
        self.woken: bool | None = None
        self.elapsed = 0.0

    def run(self) -> None:
        with self.notifier.subscribe(*self.action_ids) as subscription:
            self.subscribed.set()
            started = time.monotonic()
            self.woken = subscription.wait(self.timeout)
            self.elapsed = time.monotonic() - started


def _start(waiters: Sequence[Waiter]) -> None:
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        assert waiter.subscribed.wait(5)


@pytest.mark.redis
def test_publish_sends_one_message_with_the_comma_joined_ids(
    notifier: notify.RedisNotifier, redis_url: str
) -> None:
    pubsub = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(notifier.channel)
    try:
        assert pubsub.get_message(timeout=1) is None  # the subscribe confirmation, skipped
        notifier.publish([31, 7, 12])
        message = pubsub.get_message(timeout=2)
        assert message is not None and message["data"] == b"31,7,12"
        assert pubsub.get_message(timeout=0.2) is None  # one message, not one per id
    finally:
        pubsub.close()


@pytest.mark.redis
def test_a_publish_wakes_only_the_waiters_of_its_ids(notifier: notify.RedisNotifier) -> None:
    first, second = Waiter(notifier, 101), Waiter(notifier, 102)
    _start([first, second])
    notifier.publish([101])
    first.join(5)
    assert first.woken is True and first.elapsed < 2
    second.join(0.3)
    assert second.is_alive() and second.woken is None  # 102 still waits
    notifier.publish([999])  # an id nobody here waits for
    second.join(0.2)
    assert second.is_alive()
    notifier.publish([102])
    second.join(5)
    assert second.woken is True


@pytest.mark.redis
def test_one_publish_of_several_ids_wakes_each_of_their_waiters(
    notifier: notify.RedisNotifier,
) -> None:
    first, second, bystander = Waiter(notifier, 201), Waiter(notifier, 202), Waiter(notifier, 203)
    _start([first, second, bystander])
    notifier.publish([201, 202])
    for waiter in (first, second):
        waiter.join(5)
        assert waiter.woken is True and waiter.elapsed < 2
    bystander.join(0.3)
    assert bystander.is_alive()
    notifier.publish([203])
    bystander.join(5)
    assert bystander.woken is True


class _RecordingClient:
    """Stands in for the notifier's Redis client: notes every use."""

    def __init__(self) -> None:
        self.used: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.used.append(name)
        raise AssertionError(f"subscribe used the Redis client ({name})")


@pytest.mark.redis
def test_the_first_subscribe_starts_the_listener_and_later_ones_cost_no_round_trip(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = notify.RedisNotifier(redis_url, _channel())
    assert fresh._listener is None and not fresh.listening.is_set()
    with fresh.subscribe(1):
        listener = fresh._listener
        assert listener is not None and listener.is_alive()
        assert fresh.listening.is_set()  # connected before the first subscribe returned
    threads = threading.active_count()
    recording = _RecordingClient()
    monkeypatch.setattr(fresh, "client", recording)
    started = time.monotonic()
    for action_id in range(2, 502):
        with fresh.subscribe(action_id, action_id + 1_000):
            pass
    assert time.monotonic() - started < 1.0
    assert recording.used == []  # no command, no connection
    assert fresh._listener is listener and threading.active_count() == threads
    monkeypatch.undo()
    waiter = Waiter(fresh, 77)
    _start([waiter])
    fresh.publish([77])  # the one listener still delivers
    waiter.join(5)
    assert waiter.woken is True


@pytest.mark.redis
def test_a_thousand_messages_wake_each_of_fifty_waiters_for_its_id(
    notifier: notify.RedisNotifier,
) -> None:
    base, noise = 50_000, 10_000_000
    waiters = [Waiter(notifier, base + i, timeout=15) for i in range(50)]
    never = Waiter(notifier, base + 999, timeout=15)  # its id is never published
    _start([*waiters, never])
    messages = []
    for k in range(1000):
        ids = [noise + 10 * k + j for j in range(10)]
        if k % 20 == 19:  # the waiters' ids are spread over the whole run, the last one last
            ids[k % 10] = base + k // 20
        messages.append(ids)
    started = time.monotonic()
    for ids in messages:
        notifier.publish(ids)
    for waiter in waiters:
        waiter.join(max(0.1, started + 5 - time.monotonic()))
    late = [w.action_ids for w in waiters if w.woken is not True]
    assert late == [], f"not woken within 5 s: {late}"
    assert time.monotonic() - started < 5
    assert never.is_alive() and never.woken is None  # nobody was woken by anything else
    notifier.publish([base + 999])
    never.join(5)
    assert never.woken is True


class _StopListener:
    """RedisNotifier has no close(), and a listener that cannot connect retries every
    LISTENER_RETRY_S for ever: as its client, this ends its thread at the next retry."""

    def pubsub(self) -> Any:
        raise SystemExit


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # SystemExit
def test_without_a_listener_a_wait_is_capped_at_the_down_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(notify, "LISTENER_CONNECT_WAIT_S", 0.2)  # the first subscribe's wait
    down = notify.RedisNotifier("redis://127.0.0.1:1/0", _channel())
    try:
        with down.subscribe(5) as subscription:
            assert not down.listening.is_set()
            started = time.monotonic()
            assert subscription.wait(5) is False
            elapsed = time.monotonic() - started
        assert notify.LISTENER_DOWN_POLL_S * 0.9 <= elapsed < notify.LISTENER_DOWN_POLL_S + 0.5
    finally:
        monkeypatch.setattr(down, "client", _StopListener())
        if down._listener is not None:
            down._listener.join(notify.LISTENER_RETRY_S + 2)
    assert down._listener is not None and not down._listener.is_alive()


@pytest.mark.redis
def test_a_reconnecting_listener_wakes_every_waiter(redis_url: str) -> None:
    """Its pub/sub connection is killed: whatever was published meanwhile is unknown, so on
    reconnecting the listener wakes all waiters (they re-read the database)."""
    name = f"loomtest-{uuid.uuid4().hex[:12]}"
    fresh = notify.RedisNotifier(f"{redis_url}?client_name={name}", _channel())
    with fresh.subscribe(0):
        listener = fresh._listener
    assert listener is not None
    time.sleep(0.05)
    admin = redis.Redis.from_url(redis_url)
    with fresh.subscribe(41) as first, fresh.subscribe(42) as second:
        assert not first.wait(0.1)
        killed = [
            admin.client_kill_filter(_id=client["id"])
            for client in admin.client_list()
            if client.get("name") == name and int(client.get("sub", 0)) > 0
        ]
        assert killed  # the listener's pub/sub connection
        deadline = time.monotonic() + 5
        woken = [False, False]
        while not all(woken) and time.monotonic() < deadline:  # as the result view loops
            woken = [first.wait(0.2) or woken[0], second.wait(0.2) or woken[1]]
        assert woken == [True, True]  # nothing was published: the reconnect woke them
    assert fresh.listening.is_set() and fresh._listener is listener and listener.is_alive()


@pytest.mark.redis
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_malformed_message_does_not_stop_the_listener(notifier: notify.RedisNotifier) -> None:
    waiter = Waiter(notifier, 301, timeout=1.5)
    _start([waiter])
    notifier.client.publish(notifier.channel, "not-an-id")
    time.sleep(0.2)
    notifier.publish([301])
    waiter.join(5)
    assert waiter.woken is True


@pytest.mark.redis
def test_an_end_published_with_its_row_reaches_the_waiter_with_it(
    notifier: notify.RedisNotifier,
) -> None:
    """The row rides along to the waiters of its id only; an end without rows leaves none."""
    row = {"status": "succeeded", "output": "ü\n", "finished_at": "2026-11-21T18:00:00.1234+00:00"}
    with notifier.subscribe(401) as first, notifier.subscribe(402) as second:
        notifier.publish([401, 402], {401: row})
        assert first.wait(5) and second.wait(5)
        assert first.progress_of(401) == row
        assert second.progress_of(402) is None  # ended, but published without its row


def test_a_notice_is_ids_or_ids_with_rows_and_anything_else_is_refused() -> None:
    assert notify.encode_notice([3, 4]) == "3,4"
    assert notify.decode_notice(b"3,4") == ([3, 4], None)
    row = {"status": "failed", "exit_code": 2}
    assert notify.decode_notice(notify.encode_notice([3, 4], {4: row})) == ([3, 4], {4: row})
    for malformed in ("not-an-id", '{"ids": [1]}', '{"ids": "x", "progress": {}}', "{oops"):
        with pytest.raises(ValueError):
            notify.decode_notice(malformed)
