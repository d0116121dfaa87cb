"""The central replay buffer as a service, and its client (artos §4.1, §5).

``BufferServer`` owns one or more ``ExperienceBuffer`` s and answers requests on a ZeroMQ ROUTER
socket from its own thread: put, put_object, get_object, gather, sample (full batch, uniform,
prioritised), update_priorities, drop_actor, stats. Triggers run in the server thread on every
change, and time triggers also every ``TICK_S``; their firings go wherever their passers send
them. ``BufferClient`` is the blocking client an actor, a cache service or a learner uses (one
per thread).

No Django and no database: definitions come in as arguments, data moves over ZeroMQ.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import zmq

from workers.algorithms.artos import BufferFullError, CapacityError, SamplerError, TriggerError
from workers.buffers.schema import SchemaError
from workers.buffers.store import DataLostError, ExperienceBuffer
from workers.buffers.wire import WireError, decode, encode

logger = logging.getLogger(__name__)

TICK_S = 0.05  # how often the server checks the buffers' time triggers

Arrays = dict[str, npt.NDArray[Any]]
_CLIENT_ERRORS = (
    SchemaError,
    WireError,
    DataLostError,
    BufferFullError,
    CapacityError,
    SamplerError,
    TriggerError,
    KeyError,
)


class BufferServiceError(RuntimeError):
    """The server refused a request; ``kind`` is the server-side error class."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class BufferServer:
    """Serve buffers on ``address`` (``tcp://127.0.0.1`` alone picks a free port)."""

    def __init__(
        self, buffers: Iterable[ExperienceBuffer] = (), address: str = "tcp://127.0.0.1"
    ) -> None:
        self.buffers = {b.name: b for b in buffers}
        self._context: zmq.Context[Any] = zmq.Context.instance()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        if address.startswith("tcp://") and address.count(":") == 1:
            self.address = f"{address}:{self._socket.bind_to_random_port(address)}"
        else:
            self._socket.bind(address)
            self.address = address
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="buffer-server", daemon=True)

    def declare(self, buffer: ExperienceBuffer) -> ExperienceBuffer | None:
        """Serve ``buffer`` from now on, in place of any of its name (returned: its data goes
        with it). Safe from any thread: a request sees the old buffer or the new one."""
        previous = self.buffers.get(buffer.name)
        self.buffers = {**self.buffers, buffer.name: buffer}
        return previous

    def drop(self, name: str) -> ExperienceBuffer | None:
        """Stop serving ``name`` (its data goes); None if it was not served."""
        previous = self.buffers.get(name)
        if previous is not None:
            self.buffers = {k: v for k, v in self.buffers.items() if k != name}
        return previous

    def start(self) -> BufferServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._socket.close()

    def __enter__(self) -> BufferServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        next_tick = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_tick:
                self._tick()
                next_tick = time.monotonic() + TICK_S
            if not self._socket.poll(int(TICK_S * 1000)):
                continue
            identity, *frames = self._socket.recv_multipart(copy=False)
            try:
                header, arrays = decode(frames)
                reply = self._handle(header, arrays)
            except _CLIENT_ERRORS as error:
                reply = encode({"error": type(error).__name__, "message": str(error)})
            except Exception as error:  # a bug must not kill the server; the client hears it
                logger.exception("buffer request failed")
                reply = encode({"error": type(error).__name__, "message": str(error)})
            self._socket.send_multipart([identity, *reply], copy=False)

    def _tick(self) -> None:
        """The clock moved: every buffer's time triggers are checked (artos Table 3's
        TimeTrigger fires on the period, not only on a change)."""
        for buffer in list(self.buffers.values()):
            try:
                buffer.tick()
            except Exception:  # a firing that fails to pass must not stop the server
                logger.exception("buffer %s: time triggers failed", buffer.name)

    def _buffer(self, header: Mapping[str, Any]) -> ExperienceBuffer:
        name = header.get("buffer")
        if name not in self.buffers:
            raise KeyError(f"buffer: no buffer named {name!r}")
        return self.buffers[name]

    def _handle(self, header: dict[str, Any], arrays: Arrays) -> list[Any]:
        op = header.get("op")
        buffer = self._buffer(header)
        keys = header.get("keys") or ()
        if op == "put":
            count, checked = buffer.schema.validate(arrays)
            firings = buffer.put_validated(str(header["actor"]), count, checked)
            return encode({"ok": True, "firings": len(firings)})
        if op == "put_object":
            buffer.put_object(str(header["key"]), dict(arrays) if arrays else header.get("value"))
            return encode({"ok": True})
        if op == "get_object":
            version, value = buffer.get_object(str(header["key"]))
            if isinstance(value, dict) and all(isinstance(v, np.ndarray) for v in value.values()):
                return encode({"version": version}, value)
            return encode({"version": version, "value": value})
        if op == "gather":
            slices = {a: (int(s), int(e)) for a, (s, e) in header["slices"].items()}
            return encode({"ok": True}, buffer.gather(slices, keys))
        if op == "sample":
            kind = header.get("sampler")
            if kind == "full_batch":
                slots, data = buffer.sample_full_batch(keys)
                return encode({"ok": True}, {"slots": slots, **data})
            if kind == "uniform":
                slots, data = buffer.sample_uniform(int(header["batch_size"]), keys)
                return encode({"ok": True}, {"slots": slots, **data})
            if kind == "prioritised":
                batch, data = buffer.sample_prioritised(int(header["batch_size"]), keys)
                extra = {"slots": batch.indices, "weights": batch.weights}
                return encode({"ok": True}, {**extra, **data})
            raise SamplerError(
                f"sampler: expected full_batch, uniform or prioritised, got {kind!r}"
            )
        if op == "update_priorities":
            buffer.update_priorities(arrays["slots"], arrays["td_errors"])
            return encode({"ok": True})
        if op == "drop_actor":
            since = header.get("since_step")
            dropped = buffer.drop_actor(str(header["actor"]), None if since is None else int(since))
            return encode({"ok": True, "dropped": dropped})
        if op == "stats":
            return encode({"ok": True, "stats": buffer.snapshot()})
        raise WireError(f"op: unknown operation {op!r}")


class BufferClient:
    """Blocking client of a ``BufferServer``; one per thread (ZeroMQ sockets are not shared)."""

    def __init__(self, address: str, timeout_s: float = 30.0) -> None:
        self.address = address
        self.timeout_ms = int(timeout_s * 1000)
        self._socket = self._connect()

    def _connect(self) -> zmq.Socket[Any]:
        sock: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.address)
        return sock

    def close(self) -> None:
        self._socket.close()

    def _call(
        self, header: Mapping[str, Any], arrays: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], Arrays]:
        self._socket.send_multipart(encode(header, arrays), copy=False)
        if not self._socket.poll(self.timeout_ms):
            # a late reply must not answer the next request: start on a fresh socket
            self._socket.close()
            self._socket = self._connect()
            raise TimeoutError(f"buffer service at {self.address} did not answer {header['op']}")
        reply, data = decode(self._socket.recv_multipart(copy=False))
        if "error" in reply:
            raise BufferServiceError(reply["error"], reply["message"])
        return reply, data

    def put(self, buffer: str, actor: str, batch: Mapping[str, npt.NDArray[Any]]) -> int:
        """Append steps for ``actor`` (validated by the server's schema); returns firings."""
        reply, _ = self._call({"op": "put", "buffer": buffer, "actor": actor}, batch)
        return int(reply["firings"])

    def put_object(self, buffer: str, key: str, value: Mapping[str, npt.NDArray[Any]]) -> None:
        self._call({"op": "put_object", "buffer": buffer, "key": key}, value)

    def get_object(self, buffer: str, key: str) -> tuple[int, Any]:
        reply, data = self._call({"op": "get_object", "buffer": buffer, "key": key})
        return int(reply["version"]), data if data else reply.get("value")

    def gather(
        self, buffer: str, slices: Mapping[str, tuple[int, int]], keys: Iterable[str] = ()
    ) -> Arrays:
        header = {"op": "gather", "buffer": buffer, "slices": dict(slices), "keys": list(keys)}
        return self._call(header)[1]

    def sample(
        self, buffer: str, sampler: str, batch_size: int = 0, keys: Iterable[str] = ()
    ) -> Arrays:
        header = {
            "op": "sample",
            "buffer": buffer,
            "sampler": sampler,
            "batch_size": batch_size,
            "keys": list(keys),
        }
        return self._call(header)[1]

    def update_priorities(self, buffer: str, slots: Any, td_errors: Any) -> None:
        arrays = {
            "slots": np.asarray(slots, dtype=np.int64),
            "td_errors": np.asarray(td_errors, dtype=np.float64),
        }
        self._call({"op": "update_priorities", "buffer": buffer}, arrays)

    def drop_actor(self, buffer: str, actor: str, since_step: int | None = None) -> int:
        header = {"op": "drop_actor", "buffer": buffer, "actor": actor, "since_step": since_step}
        return int(self._call(header)[0]["dropped"])

    def stats(self, buffer: str) -> dict[str, Any]:
        stats: dict[str, Any] = self._call({"op": "stats", "buffer": buffer})[0]["stats"]
        return stats
