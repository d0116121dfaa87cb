"""The central replay buffer as a service, and its client (artos §4.1, §5).

``BufferServer`` owns one or more ``ExperienceBuffer`` s and answers requests on a ZeroMQ ROUTER
socket from its own thread: put, put_object, get_object, gather, sample (full batch, uniform,
prioritised, n-step, FIFO per actor), update_priorities, drop_actor, report_actors (a workflow's
elastic actors: state and start-up latencies, the latest per workflow and actor, shown in
stats), stats. Triggers run in the server thread on every
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
MAX_ACTOR_STATES = 1000  # per buffer: past it the least recently reported actor goes
N_STEP_FIELDS = ("n", "gamma", "reward_key", "done_key")
ACTOR_STATES = ("checkpointed", "prewarming", "prewarmed", "running", "failed")
ACTOR_COUNTS = ("invocations", "restored", "cold")
ACTOR_SECONDS = (
    "last_startup_wait_s",
    "last_restore_s",
    "startup_wait_p50_s",
    "startup_wait_p99_s",
)

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
        self._actor_states: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
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
            if kind == "n_step":
                params: dict[str, Any] = {k: header.get(k) for k in N_STEP_FIELDS}
                slots, data = buffer.sample_n_step(
                    _count(header, "batch_size"),
                    **params,
                    keys=keys,
                    last_keys=header.get("last_keys") or (),
                )
                return encode({"ok": True}, {"slots": slots, **data})
            if kind == "fifo_per_actor":
                size, actor = header.get("batch_size") or None, header.get("actor")
                if actor is not None and not isinstance(actor, str):
                    raise SamplerError(f"actor: expected an actor's name, got {actor!r}")
                name, steps, slots, data = buffer.sample_fifo(
                    None if size is None else _count(header, "batch_size"), actor, keys
                )
                arrays = {"slots": slots, "fifo.steps": steps, **data}
                return encode({"ok": True, "actor": name}, arrays)
            raise SamplerError(
                "sampler: expected full_batch, uniform, prioritised, n_step or fifo_per_actor, "
                f"got {kind!r}"
            )
        if op == "update_priorities":
            buffer.update_priorities(arrays["slots"], arrays["td_errors"])
            return encode({"ok": True})
        if op == "drop_actor":
            since = header.get("since_step")
            dropped = buffer.drop_actor(str(header["actor"]), None if since is None else int(since))
            return encode({"ok": True, "dropped": dropped})
        if op == "report_actors":
            self._report_actors(buffer.name, header.get("workflow"), header.get("actors"))
            return encode({"ok": True})
        if op == "stats":
            states = self._actor_states.get(buffer.name, {})
            listed = [states[key] for key in sorted(states)]
            return encode({"ok": True, "stats": {**buffer.snapshot(), "actor_states": listed}})
        raise WireError(f"op: unknown operation {op!r}")

    def _report_actors(self, buffer: str, workflow: Any, actors: Any) -> None:
        """Keep each reported actor's latest state (artos §4.3's elastic actors, for the
        dashboard); the report is checked whole before any of it is kept."""
        if not isinstance(workflow, str) or not 0 < len(workflow) <= 200:
            raise WireError(f"workflow: expected a name of 1..200 characters, got {workflow!r}")
        if not isinstance(actors, list) or len(actors) > MAX_ACTOR_STATES:
            raise WireError(f"actors: expected a list of at most {MAX_ACTOR_STATES} reports")
        checked = [actor_report(f"actors[{i}]", report) for i, report in enumerate(actors)]
        states = self._actor_states.setdefault(buffer, {})
        now = time.time()
        for report in checked:
            key = (workflow, report["actor"])
            states.pop(key, None)  # re-inserted last: the dict stays in order of reports
            states[key] = {"workflow": workflow, **report, "reported_at": now}
        while len(states) > MAX_ACTOR_STATES:
            del states[next(iter(states))]


def _count(header: Mapping[str, Any], field: str) -> int:
    value = header.get(field)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SamplerError(f"{field}: expected a positive integer, got {value!r}")
    return value


def actor_report(field: str, report: Any) -> dict[str, Any]:
    """One actor's report as the service keeps it, or ``WireError`` naming the field."""
    if not isinstance(report, dict):
        raise WireError(f"{field}: expected an object")
    actor, state = report.get("actor"), report.get("state")
    if not isinstance(actor, str) or not 0 < len(actor) <= 200:
        raise WireError(f"{field}.actor: expected a name of 1..200 characters, got {actor!r}")
    if state not in ACTOR_STATES:
        raise WireError(f"{field}.state: expected one of {', '.join(ACTOR_STATES)}")
    out: dict[str, Any] = {"actor": actor, "state": state}
    for name in ACTOR_COUNTS:
        value = report.get(name, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise WireError(f"{field}.{name}: expected a count, got {value!r}")
        out[name] = value
    for name in ACTOR_SECONDS:
        value = report.get(name)
        if value is not None and (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not 0 <= value < float("inf")
        ):
            raise WireError(f"{field}.{name}: expected seconds >= 0 or null, got {value!r}")
        out[name] = None if value is None else float(value)
    return out


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

    def sample_n_step(
        self,
        buffer: str,
        batch_size: int,
        n: int,
        gamma: float,
        reward_key: str,
        done_key: str,
        keys: Iterable[str] = (),
        last_keys: Iterable[str] = (),
    ) -> Arrays:
        """Uniform steps with their n-step returns: ``slots``, the keys, and the
        ``n_step.*`` arrays (``ExperienceBuffer.sample_n_step``)."""
        header = {
            "op": "sample",
            "buffer": buffer,
            "sampler": "n_step",
            "batch_size": batch_size,
            "n": n,
            "gamma": gamma,
            "reward_key": reward_key,
            "done_key": done_key,
            "keys": list(keys),
            "last_keys": list(last_keys),
        }
        return self._call(header)[1]

    def sample_fifo(
        self,
        buffer: str,
        batch_size: int | None = None,
        actor: str | None = None,
        keys: Iterable[str] = (),
    ) -> tuple[str, Arrays]:
        """The oldest waiting block of one actor's steps (of ``actor`` when given), at most
        ``batch_size``: ``(actor, arrays)`` with ``slots`` and ``fifo.steps`` (its step
        numbers, in order). Each step comes once; nothing waiting is a ``SamplerError``."""
        header = {
            "op": "sample",
            "buffer": buffer,
            "sampler": "fifo_per_actor",
            "batch_size": batch_size,
            "actor": actor,
            "keys": list(keys),
        }
        reply, data = self._call(header)
        return str(reply["actor"]), data

    def report_actors(self, buffer: str, workflow: str, actors: list[dict[str, Any]]) -> None:
        """A workflow's elastic actors as they are now (``ActorPool.summaries``)."""
        self._call(
            {"op": "report_actors", "buffer": buffer, "workflow": workflow, "actors": actors}
        )

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
