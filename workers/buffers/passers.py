"""How a trigger's firing reaches its target (artos §4.2, Fig. 10: ``TriggerWrapper`` and
``MessagePasser``): called directly, put on a local queue, or sent over ZeroMQ to another node.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Callable
from typing import Any, Protocol

import zmq

from workers.algorithms.artos import BufferEvent, BufferView, Firing, Trigger


class MessagePasser(Protocol):
    def pass_message(self, message: Firing) -> Any: ...


class DirectPasser:
    """Call the target in the buffer's own thread (a learner living beside its buffer)."""

    def __init__(self, target: Callable[[Firing], Any]) -> None:
        self.target = target

    def pass_message(self, message: Firing) -> Any:
        return self.target(message)


class QueuePasser:
    """Hand the firing to a local queue (``queue.Queue`` or ``multiprocessing`` queue)."""

    def __init__(self, target: queue.Queue[Firing] | Any) -> None:
        self.queue = target

    def pass_message(self, message: Firing) -> None:
        self.queue.put(message)


class RemotePasser:
    """Send the firing as JSON over a ZeroMQ PUSH socket to ``address`` (another process/node)."""

    def __init__(self, address: str, context: zmq.Context[Any] | None = None) -> None:
        self.address = address
        self._socket = (context or zmq.Context.instance()).socket(zmq.PUSH)
        self._socket.setsockopt(zmq.LINGER, 1000)
        self._socket.connect(address)

    def pass_message(self, message: Firing) -> None:
        self._socket.send(json.dumps(message).encode())

    def close(self) -> None:
        self._socket.close()


class RemoteReceiver:
    """The other end of ``RemotePasser``: binds ``address`` (or a random TCP port)."""

    def __init__(self, address: str = "tcp://127.0.0.1", context: zmq.Context[Any] | None = None):
        self._socket = (context or zmq.Context.instance()).socket(zmq.PULL)
        self._socket.setsockopt(zmq.LINGER, 0)
        if address.startswith("tcp://") and address.count(":") == 1:
            port = self._socket.bind_to_random_port(address)
            self.address = f"{address}:{port}"
        else:
            self._socket.bind(address)
            self.address = address

    def receive(self, timeout_s: float | None = None) -> Firing | None:
        """The next firing, or None after ``timeout_s`` (None: wait for ever)."""
        if timeout_s is not None and not self._socket.poll(int(timeout_s * 1000)):
            return None
        message: Firing = json.loads(self._socket.recv())
        return message

    def close(self) -> None:
        self._socket.close()


class TriggerWrapper:
    """artos Fig. 10: a trigger, its id and where its firings go."""

    def __init__(self, trigger_id: str, trigger: Trigger, passer: MessagePasser) -> None:
        self.trigger_id = trigger_id
        self.trigger = trigger
        self.passer = passer
        self.firings = 0

    def check(self, view: BufferView, event: BufferEvent) -> list[Firing]:
        firings = self.trigger.check(view, event)
        for message in firings:
            message["trigger_id"] = self.trigger_id
            self.firings += 1
            self.passer.pass_message(message)
        return firings
