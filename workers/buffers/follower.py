"""A buffer service that serves what the control plane declares (``apps.buffers.registry``).

The web tier keeps every buffer definition in PostgreSQL and publishes it to the Redis hash
``{prefix}:buffers:definitions``, announcing each write or withdrawal on the channel
``{prefix}:buffers:changed`` (``definitions.BufferNames``). ``DefinitionFollower`` keeps a
``BufferServer`` in step with them from its own thread: it subscribes first, then loads the
whole hash (so no change falls between the two), then declares, replaces or drops the one buffer
each announcement names. A definition that changes replaces its buffer (the data held goes, as
a new capacity or schema cannot keep it); one announced again unchanged keeps its data. Redis
lost: it reconnects and loads everything again. A definition it cannot build is logged and
skipped, and the web's validation (the same ``definitions`` rules) keeps that from happening.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import redis

from workers.algorithms.artos import TriggerError
from workers.buffers.definitions import BufferNames, buffer_from_definition
from workers.buffers.schema import SchemaError
from workers.buffers.service import BufferServer

log = logging.getLogger(__name__)

RETRY_S = 1.0


class ServedDefinitions:
    """What ``server`` serves, kept equal to a set of definitions (name → definition JSON):
    a new or changed definition is declared (a changed one replaces its buffer and its data),
    one announced again unchanged keeps its data, one withdrawn is dropped."""

    def __init__(self, server: BufferServer) -> None:
        self.server = server
        self._served: dict[str, str] = {}  # buffer name → the definition JSON it was built from

    def replace_all(self, definitions: dict[str, str]) -> None:
        """Serve exactly ``definitions``."""
        for name in set(self._served) - set(definitions):
            self.drop(name)
        for name, raw in definitions.items():
            self.declare(name, raw)

    def declare(self, name: str, raw: str) -> None:
        if self._served.get(name) == raw:
            return  # announced again, unchanged: keep its data
        try:
            definition = json.loads(raw)
            if definition.get("name") != name:
                raise SchemaError(f"name: the definition names {definition.get('name')!r}")
            buffer = buffer_from_definition(definition)
        except (ValueError, KeyError, TypeError, SchemaError, TriggerError) as error:
            log.error("buffer %s: definition not served: %s", name, error)
            return
        replaced = self.server.declare(buffer)
        self._served[name] = raw
        log.info("buffer %s %s", name, "replaced (its data dropped)" if replaced else "declared")

    def drop(self, name: str) -> None:
        self._served.pop(name, None)
        if self.server.drop(name) is not None:
            log.info("buffer %s dropped", name)


class DefinitionFollower:
    """Keep ``server`` serving the definitions under ``names`` in the Redis at ``redis_url``."""

    def __init__(self, server: BufferServer, redis_url: str, names: BufferNames) -> None:
        self.server = server
        self.redis_url = redis_url
        self.names = names
        self.loaded = threading.Event()  # set after each full load (tests, readiness)
        self._served = ServedDefinitions(server)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="buffer-definitions", daemon=True)

    def start(self) -> DefinitionFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            client = redis.Redis.from_url(self.redis_url, socket_timeout=5)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self.names.changed)
                self._load_all(client)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.2)
                    if message is not None:
                        self._apply(client, _text(message["data"]))
            except redis.RedisError as error:
                log.warning("buffer definitions: Redis lost (%s); reloading", error)
                self._stop.wait(RETRY_S)
            finally:
                pubsub.close()
                client.close()

    def _load_all(self, client: redis.Redis) -> None:
        held: Any = client.hgetall(self.names.definitions)
        self._served.replace_all({_text(name): _text(raw) for name, raw in held.items()})
        self.loaded.set()

    def _apply(self, client: redis.Redis, name: str) -> None:
        raw: Any = client.hget(self.names.definitions, name)
        if raw is None:
            self._served.drop(name)
        else:
            self._served.declare(name, _text(raw))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
