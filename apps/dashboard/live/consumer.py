"""The one multiplexed websocket consumer at ``/ws/`` (STYLE.md item 7, after AWX's consumer).

Protocol (JSON text frames, client → server):

- ``{"op": "subscribe", "group": "pool:cpu"}`` / ``{"op": "unsubscribe", "group": ...}``
- ``{"op": "pause"}`` while the tab is hidden (the server stops forwarding; nothing is queued) and
  ``{"op": "resume"}`` when it is visible again (the client refetches once over REST);
- ``{"op": "command", "id": 7, "name": "policy.update", "args": {...}}`` for operator commands
  (operator_commands.py); each is permission-checked exactly like its REST twin.

Server → client: ``{"op": "subscribed"|"unsubscribed", "group": ...}``, ``{"op": "event",
"group": ..., "data": {...}}``, ``{"op": "result", "id": 7, "ok": bool, ...}`` and ``{"op":
"error", "group"?: ..., "reason": ...}``. Every subscription is checked by access.topic_authorize.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.dashboard.live import access, operator_commands
from apps.dashboard.live.groups import InvalidTopic, Topic, topic_parse
from apps.dashboard.live.watched_topics import live_publisher
from apps.dashboard.roles import user_can_view
from apps.metrics.instruments import WS_CONNECTIONS, WS_EVENTS, WS_REFUSALS
from controlplane.api.limits import JsonRejected, parse_json_body

# Close codes in the 4000–4999 range reserved for applications.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
MAX_SUBSCRIPTIONS = 256


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    """Holds one socket's subscriptions; forwards channel-layer events for them unless paused."""

    async def connect(self) -> None:
        self.subscriptions: dict[str, Topic] = {}
        self.paused = False
        self.counted = False
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(user_can_view)(user):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.accept()
        self.counted = True
        live_publisher.socket_opened()
        WS_CONNECTIONS.inc()

    async def disconnect(self, code: int) -> None:
        subscriptions = list(getattr(self, "subscriptions", {}).values())
        for topic in subscriptions:
            await self.channel_layer.group_discard(topic.layer_group, self.channel_name)
        if getattr(self, "counted", False):
            live_publisher.socket_closed(subscriptions)
            WS_CONNECTIONS.dec()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Every message through the REST API's body limits (``controlplane.api.limits``): a
        deeply nested or malformed one is answered with an error, not a dropped socket."""
        raw = text_data if text_data is not None else bytes_data
        if raw is None:
            await self.send_json({"op": "error", "reason": "empty message"})
            return
        try:
            content = parse_json_body(raw)
        except JsonRejected as error:
            await self.send_json({"op": "error", "field": error.field, "reason": error.reason})
            return
        await self.receive_json(content)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict):
            await self.send_json({"op": "error", "reason": "message must be a JSON object"})
            return
        op = content.get("op")
        if op == "subscribe":
            await self._subscribe(content.get("group"))
        elif op == "unsubscribe":
            await self._unsubscribe(content.get("group"))
        elif op == "pause":
            await self._set_paused(True)
        elif op == "resume":
            await self._set_paused(False)
        elif op == "command":
            await self._command(content)
        elif op == "ping":
            await self.send_json({"op": "pong"})
        else:
            await self.send_json({"op": "error", "reason": f"unknown op {op!r}"})

    async def _subscribe(self, raw_group: object) -> None:
        try:
            topic = topic_parse(raw_group)
        except InvalidTopic as error:
            await self.send_json({"op": "error", "group": raw_group, "reason": str(error)})
            return
        name = str(topic)
        if name in self.subscriptions:
            await self.send_json({"op": "subscribed", "group": name})
            return
        if len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
            await self.send_json(
                {"op": "error", "group": name, "reason": "too many subscriptions on one socket"}
            )
            return
        refusal = await database_sync_to_async(access.topic_authorize)(self.scope["user"], topic)
        if refusal is not None:
            WS_REFUSALS.labels("subscription").inc()
            await self.send_json({"op": "error", "group": name, "reason": refusal})
            return
        self.subscriptions[name] = topic
        live_publisher.watch(topic)
        if not self.paused:
            await self.channel_layer.group_add(topic.layer_group, self.channel_name)
        await self.send_json({"op": "subscribed", "group": name})

    async def _unsubscribe(self, raw_group: object) -> None:
        try:
            topic = topic_parse(raw_group)
        except InvalidTopic as error:
            await self.send_json({"op": "error", "group": raw_group, "reason": str(error)})
            return
        if self.subscriptions.pop(str(topic), None) is not None:
            live_publisher.unwatch(topic)
            await self.channel_layer.group_discard(topic.layer_group, self.channel_name)
        await self.send_json({"op": "unsubscribed", "group": str(topic)})

    async def _set_paused(self, paused: bool) -> None:
        """Leave the layer groups while hidden so a background tab costs the server nothing."""
        if paused == self.paused:
            return
        self.paused = paused
        for topic in self.subscriptions.values():
            if paused:
                await self.channel_layer.group_discard(topic.layer_group, self.channel_name)
            else:
                await self.channel_layer.group_add(topic.layer_group, self.channel_name)
        await self.send_json({"op": "paused" if paused else "resumed"})

    async def _command(self, content: dict[str, Any]) -> None:
        request_id = content.get("id")
        outcome = await database_sync_to_async(operator_commands.command_run)(
            user=self.scope["user"], name=content.get("name"), args=content.get("args")
        )
        await self.send_json({"op": "result", "id": request_id, **outcome})

    async def dashboard_event(self, event: dict[str, Any]) -> None:
        """Channel-layer handler for publish(): forward to the socket unless paused."""
        topic = event["topic"]
        if self.paused or topic not in self.subscriptions:
            return
        WS_EVENTS.inc()
        await self.send_json({"op": "event", "group": topic, "data": event["data"]})
