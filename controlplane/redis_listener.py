"""One Redis pub/sub channel, listened to by a thread for its process's life.

Two listeners use it: ``apps.actions.notify.RedisNotifier`` (wakes result waiters) and
``apps.jobs.key_cache.Listener`` (drops cached API keys). Each runs ``listen`` on a daemon thread
of its own and says, through callbacks, what a (re)subscription, a message and a lost connection
mean to it.
"""

from __future__ import annotations

from collections.abc import Callable

import redis
from redis.client import PubSub


def listen(
    new_pubsub: Callable[[], PubSub],
    channel: str,
    *,
    on_subscribed: Callable[[], None],
    on_message: Callable[[bytes], None],
    on_lost: Callable[[redis.RedisError], None],
    idle_s: Callable[[], float],
    keep_going: Callable[[], bool] = lambda: True,
) -> None:
    """Subscribe to ``channel`` (on a fresh ``new_pubsub()`` each time) and hand each message to
    ``on_message`` until ``keep_going()`` is false (checked at least every ``idle_s()`` seconds).

    ``on_subscribed`` runs on every (re)subscription: whatever was published while nobody
    listened went unheard. On a Redis error ``on_lost`` runs (and may wait before the next try),
    then the thread subscribes again on a fresh connection.
    """
    while keep_going():
        pubsub = new_pubsub()
        try:
            pubsub.subscribe(channel)
            while keep_going():
                message = pubsub.get_message(timeout=idle_s())
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    on_subscribed()
                elif message["type"] == "message":
                    on_message(message["data"])
        except redis.RedisError as error:
            on_lost(error)
        finally:
            pubsub.close()
