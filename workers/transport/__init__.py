"""Transport between the scheduler and the node agents (DESIGN.md "Processes").

Import from here: ``Transport``, ``RedisStreamsTransport``, ``InProcessTransport``,
``StreamNames`` and the message classes.
"""

from workers.transport.base import Delivery, PendingEntry, Transport
from workers.transport.inprocess import InProcessTransport
from workers.transport.messages import (
    ActionResult,
    ActionsCancelled,
    ActionsSubmitted,
    ApiRequestSpec,
    Cancel,
    Dispatch,
    Heartbeat,
    Message,
    MessageError,
    NodeRegister,
    TrajectoryEnd,
    decode_message,
)
from workers.transport.redis_streams import RedisStreamsTransport
from workers.transport.streams import AGENT_GROUP, SCHEDULER_GROUP, StreamNames

__all__ = [
    "AGENT_GROUP",
    "SCHEDULER_GROUP",
    "ActionResult",
    "ActionsCancelled",
    "ActionsSubmitted",
    "ApiRequestSpec",
    "Cancel",
    "Delivery",
    "Dispatch",
    "Heartbeat",
    "InProcessTransport",
    "Message",
    "MessageError",
    "NodeRegister",
    "PendingEntry",
    "RedisStreamsTransport",
    "StreamNames",
    "TrajectoryEnd",
    "Transport",
    "decode_message",
]
