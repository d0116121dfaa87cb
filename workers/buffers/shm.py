"""Node-local cache buffers in shared memory (artos §4.2, Fig. 9; §4.4 transfer pipelines).

One ``multiprocessing.shared_memory`` segment per cache buffer holds a JSON layout, a header
block of counters and, per data key, one cyclic array per actor (the *actor data blocks*):
``written[actor, key]`` counts steps the actor wrote, ``sent[actor, key]`` steps the node's cache
service already moved on. An actor process (forked or started on its own) attaches by name and
writes its steps straight into its block: one writer per block, counters bumped after the data,
so readers never see a half-written step. A write that would overwrite steps not yet sent is
refused (``BufferFullError``), never silently dropped.

``CacheService`` runs beside the actors: it is told of each write over a ZeroMQ ``ipc`` socket,
checks its ``TransferTrigger`` s on every change and sends each firing's keys and steps to the
central replay buffer, stage by stage.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Iterable, Mapping, Sequence
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import numpy as np
import numpy.typing as npt
import zmq

from workers.algorithms.artos import BufferEvent, BufferFullError, EventKind, TransferTrigger
from workers.buffers.schema import LENGTH_SUFFIX, Schema, SchemaError
from workers.buffers.service import BufferClient

_LAYOUT_BYTES = 16384
_ALIGN = 64


def _aligned(offset: int) -> int:
    return (offset + _ALIGN - 1) // _ALIGN * _ALIGN


class SharedCache:
    """A cache buffer's shared-memory segment: layout, counters and per-actor cyclic arrays."""

    def __init__(self, segment: shared_memory.SharedMemory, layout: dict[str, Any], owner: bool):
        self.segment, self.layout, self.owner = segment, layout, owner
        self.name = layout["name"]
        self.schema = Schema(layout["schema"])
        self.actor_names: list[str] = layout["actors"]
        self.steps_per_actor: int = layout["steps_per_actor"]
        self.fields: list[str] = layout["fields"]
        self.keys = self.schema.keys
        buffer = segment.buf
        counters_shape = (len(self.actor_names), len(self.keys))
        self.written = np.ndarray(counters_shape, np.int64, buffer, layout["written"])
        self.sent = np.ndarray(counters_shape, np.int64, buffer, layout["sent"])
        stored = self.schema.stored_fields()
        self.blocks: dict[str, npt.NDArray[Any]] = {}
        for field in self.fields:
            shape, dtype = stored[field]
            full = (len(self.actor_names), self.steps_per_actor, *shape)
            self.blocks[field] = np.ndarray(full, dtype, buffer, layout["offsets"][field])

    @classmethod
    def create(
        cls, name: str, schema: Schema, actors: Sequence[str], steps_per_actor: int
    ) -> SharedCache:
        """Allocate the segment (in /dev/shm on Linux); the creator unlinks it on ``close``."""
        if steps_per_actor < 1:
            raise SchemaError(
                f"steps_per_actor: expected a positive integer, got {steps_per_actor}"
            )
        if not actors or len(set(actors)) != len(actors):
            raise SchemaError(f"actors: expected distinct actor names, got {list(actors)!r}")
        stored = schema.stored_fields()
        offset = _LAYOUT_BYTES
        counters = len(actors) * len(schema.keys) * 8
        written, offset = offset, _aligned(offset + counters)
        sent, offset = offset, _aligned(offset + counters)
        offsets = {}
        for field, (shape, dtype) in stored.items():
            offsets[field] = offset
            size = (
                len(actors) * steps_per_actor * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            )
            offset = _aligned(offset + size)
        layout = {
            "name": name,
            "schema": schema.to_json(),
            "actors": list(actors),
            "steps_per_actor": steps_per_actor,
            "fields": list(stored),
            "written": written,
            "sent": sent,
            "offsets": offsets,
        }
        encoded = json.dumps(layout).encode()
        if len(encoded) + 4 > _LAYOUT_BYTES:
            raise SchemaError("schema: too many keys or actors for one cache segment's layout")
        segment = shared_memory.SharedMemory(name=name, create=True, size=offset)
        buffer = segment.buf
        assert buffer is not None
        buffer[:4] = struct.pack("<I", len(encoded))
        buffer[4 : 4 + len(encoded)] = encoded
        cache = cls(segment, layout, owner=True)
        cache.written[:] = 0
        cache.sent[:] = 0
        return cache

    @classmethod
    def attach(cls, name: str) -> SharedCache:
        # Python 3.11 registers attached segments with the resource tracker, which would unlink
        # the creator's segment when this process exits; only the creator owns it. A process
        # forked from the creator shares the creator's tracker (and its one registration), so
        # only a tracker this attach started is told to forget the segment.
        tracker_was_running = resource_tracker._resource_tracker._pid is not None  # type: ignore[attr-defined]
        segment = shared_memory.SharedMemory(name=name)
        if not tracker_was_running:
            resource_tracker.unregister(segment._name, "shared_memory")  # type: ignore[attr-defined]
        buffer = segment.buf
        assert buffer is not None
        (length,) = struct.unpack("<I", bytes(buffer[:4]))
        layout = json.loads(bytes(buffer[4 : 4 + length]))
        return cls(segment, layout, owner=False)

    def close(self) -> None:
        self.blocks.clear()
        del self.written, self.sent
        self.segment.close()
        if self.owner:
            self.segment.unlink()

    def actor_index(self, actor: str) -> int:
        try:
            return self.actor_names.index(actor)
        except ValueError:
            raise SchemaError(f"actor: {actor!r} has no block in cache {self.name}") from None

    def write(self, actor: str, batch: Mapping[str, Any]) -> int:
        """Append a batch of steps for ``actor`` into its block; returns the step count."""
        count, arrays = self.schema.validate(batch)
        row = self.actor_index(actor)
        keys = [k for k in arrays if not k.endswith(LENGTH_SUFFIX)]
        columns = [self.keys.index(k) for k in keys]
        for key, column in zip(keys, columns, strict=True):
            pending = self.written[row, column] - self.sent[row, column]
            if pending + count > self.steps_per_actor:
                raise BufferFullError(
                    f"{self.name}: {actor}'s block holds {pending} unsent steps of {key}; "
                    f"{count} more exceed its {self.steps_per_actor}"
                )
        for field, array in arrays.items():
            key = field.removesuffix(LENGTH_SUFFIX)
            start = int(self.written[row, self.keys.index(key)])
            positions = (start + np.arange(count)) % self.steps_per_actor
            self.blocks[field][row, positions] = array
        for column in columns:
            self.written[row, column] += count
        return count

    def read(self, actor: str, keys: Iterable[str], start: int, stop: int) -> dict[str, Any]:
        row = self.actor_index(actor)
        positions = np.arange(start, stop) % self.steps_per_actor
        out: dict[str, Any] = {}
        for key in keys:
            out[key] = self.blocks[key][row, positions]
            if key + LENGTH_SUFFIX in self.blocks:
                out[key + LENGTH_SUFFIX] = self.blocks[key + LENGTH_SUFFIX][row, positions]
        return out

    # BufferView for the cache's triggers
    def actors(self) -> list[str]:
        return list(self.actor_names)

    def steps(self, actor: str, key: str) -> int:
        return int(self.written[self.actor_index(actor), self.keys.index(key)])

    def object_version(self, key: str) -> int:
        return 0


def notify_address(cache_name: str) -> str:
    return f"ipc:///dev/shm/loom-artos-{cache_name}.sock"


class CacheWriter:
    """An actor's handle on its node's cache: write steps, tell the cache service."""

    def __init__(self, cache_name: str, actor: str) -> None:
        self.cache = SharedCache.attach(cache_name)
        self.actor = actor
        self.cache.actor_index(actor)
        self._pid = os.getpid()
        self._socket: zmq.Socket[Any] | None = None
        self._context: zmq.Context[Any] | None = None

    def _notifier(self) -> zmq.Socket[Any]:
        if self._socket is None or self._pid != os.getpid():  # never reuse a socket across fork
            self._pid = os.getpid()
            # its own context: closing it flushes the last notes before an actor exits
            self._context = zmq.Context()
            self._socket = self._context.socket(zmq.PUSH)
            self._socket.setsockopt(zmq.LINGER, 2000)
            self._socket.connect(notify_address(self.cache.name))
        return self._socket

    def write(self, batch: Mapping[str, Any]) -> int:
        count = self.cache.write(self.actor, batch)
        keys = [k for k in batch]
        self._notifier().send(json.dumps({"actor": self.actor, "keys": keys}).encode())
        return count

    def close(self) -> None:
        if self._socket is not None and self._context is not None and self._pid == os.getpid():
            self._socket.close()
            self._context.term()
        self._socket = self._context = None
        self.cache.close()


class CacheService:
    """The node's buffer service for one cache: transfer triggers → the central replay buffer."""

    def __init__(
        self,
        cache: SharedCache,
        trigger: TransferTrigger,
        central_address: str,
        central_buffer: str,
        clock: Any = None,
    ) -> None:
        self.cache, self.trigger = cache, trigger
        self.central_address, self.central_buffer = central_address, central_buffer
        self._socket: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.PULL)
        self._socket.setsockopt(zmq.LINGER, 0)
        path = notify_address(cache.name)
        if os.path.exists(path.removeprefix("ipc://")):
            os.unlink(path.removeprefix("ipc://"))
        self._socket.bind(path)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"cache-{cache.name}", daemon=True)
        self.transfers: list[dict[str, Any]] = []
        self._clock = clock
        self.errors: list[str] = []

    def start(self) -> CacheService:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._socket.close()
        path = notify_address(self.cache.name).removeprefix("ipc://")
        if os.path.exists(path):
            os.unlink(path)

    def _run(self) -> None:
        client = BufferClient(self.central_address)
        try:
            while not self._stop.is_set():
                if not self._socket.poll(50):
                    continue
                raw = self._socket.recv()
                try:
                    note = json.loads(raw)
                    self.handle(client, str(note["actor"]), note["keys"])
                except Exception as error:  # a bad note must not stop the node's transfers
                    self.errors.append(f"note {raw[:200]!r}: {type(error).__name__}: {error}")
        finally:
            client.close()

    def handle(self, client: BufferClient, actor: str, keys: Sequence[str]) -> None:
        """A write happened: check the transfer trigger once per key written, send firings."""
        now = self._clock() if self._clock else 0.0
        for key in keys:
            event = BufferEvent(EventKind.DATA, now, actor=actor, key=key)
            for firing in self.trigger.check(self.cache, event):
                start, stop = firing["start"], firing["stop"]
                data = self.cache.read(actor, firing["keys"], start, stop)
                try:
                    client.put(self.central_buffer, actor, data)
                except Exception as error:  # the actor is told nothing; keep the record
                    self.errors.append(f"{actor} {firing['keys']} {start}..{stop}: {error}")
                    continue
                row = self.cache.actor_index(actor)
                for sent_key in firing["keys"]:
                    column = self.cache.keys.index(sent_key)
                    self.cache.sent[row, column] = max(self.cache.sent[row, column], stop)
                self.transfers.append(firing)
