"""A worker's SSE stream relayed to the client from the socket callbacks (the lean server).

Through ASGI, each piece of a worker's stream wakes the relaying task (a future set from the
worker connection's callback, a loop turn later the task resumes) and goes out through the
server's ``send``. When the router's own server serves the request
(:mod:`workers.router.server`, ``scope["extensions"]["loom.raw_stream"]``), the worker
connection's callback writes to the client's socket itself: the complete events of each socket
read in one write, the worker's last bytes with the end of the answer in one write. The rules
are those of the ASGI relay (:meth:`Forwarder._relay_stream`): a partial event waits for its
end, the usage event gives the step's token count (and is dropped if the client did not ask
for it), a lost worker ends the stream with a retryable error event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from workers.router.pool import InFlight

USAGE = b'"usage"'


class RawStream(Protocol):
    def stream_start(self, headers: list[tuple[bytes, bytes]]) -> None: ...
    def stream_write(self, data: bytes, *, last: bool = False) -> None: ...
    def stream_throttle(self, upstream: asyncio.Transport | None) -> None: ...


class StepRecord(Protocol):
    first_at: float | None
    tokens: int


def complete_events(data: bytes) -> tuple[bytes, bytes]:
    """``data`` cut after its last complete SSE event: (the complete events, the partial rest
    that waits for its end)."""
    cut = data.rfind(b"\n\n") + 2
    return (data[:cut], data[cut:]) if cut >= 2 else (b"", data)


def _future() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


@dataclass(eq=False)
class StreamRelay:
    """A :class:`~workers.router.upstream.BodySink` writing to a :class:`RawStream`."""

    raw: RawStream
    step: StepRecord
    strip_usage: bool
    flight: InFlight
    take_usage: Callable[[bytes, Any, bool], bytes]
    lost_event: Callable[[str], bytes]
    buffer: list[bytes] = field(default_factory=list)
    pending: bytes = b""  # a partial event, kept for the next read
    done: asyncio.Future[None] = field(default_factory=_future)

    def _taken(self) -> bytes:
        data = self.pending + b"".join(self.buffer) if self.pending else b"".join(self.buffer)
        self.buffer.clear()
        self.pending = b""
        return data

    def feed(self, body: bytes) -> None:
        if self.step.first_at is None:
            self.step.first_at = time.monotonic()
        self.buffer.append(body)

    def flush(self) -> None:
        if not self.buffer or self.done.done():
            return
        data, self.pending = complete_events(self._taken())
        if not data:
            return
        if USAGE in data:
            data = self.take_usage(data, self.step, self.strip_usage)
        if data:
            self.raw.stream_write(data)

    def end(self) -> None:
        if self.done.done():
            return
        data = self._taken()
        if USAGE in data:
            data = self.take_usage(data, self.step, self.strip_usage)
        self.raw.stream_write(data, last=True)
        self.done.set_result(None)

    def lost(self, error: Exception) -> None:
        if self.done.done():
            return
        self.flush()  # complete events that arrived before the loss still go out
        reason = self.flight.lost_reason or str(error)
        self.raw.stream_write(self.lost_event(reason), last=True)
        self.done.set_result(None)
