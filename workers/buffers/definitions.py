"""Buffer definitions as data: what the control plane stores, what a buffer service builds.

A definition is the JSON the web tier keeps in PostgreSQL and publishes to Redis
(``apps.buffers.registry``): ``name``, ``schema``, ``capacity``, ``eviction``, ``prioritised``
and its enabled ``triggers`` (``name``, ``kind``, ``params``, ``target``). This module owns the
one mapping between a trigger primitive and its ``kind``/``params`` (artos §4.2, Table 3), both
ways, and builds an ``ExperienceBuffer`` from a definition, so the web's validation, the
``Workflow`` API and the buffer service agree on every field.

No Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workers.algorithms.artos import (
    DataKeyTrigger,
    Firing,
    ObjectKeyTrigger,
    TimeTrigger,
    TransferTrigger,
    Trigger,
    TriggerError,
)
from workers.buffers.passers import MessagePasser, RemotePasser
from workers.buffers.schema import Schema
from workers.buffers.store import ExperienceBuffer

ACTORS_TARGET = "@actors"  # a workflow's elastic actors (only a running Workflow has them)
TARGET_SCHEMES = ("tcp://", "ipc://")
# Each trigger kind's parameters, as ``trigger_params`` writes them and ``build_trigger`` reads.
TRIGGER_PARAMS: dict[str, tuple[str, ...]] = {
    "data_key": ("n", "size", "keys"),
    "object_key": ("key",),
    "time": ("period_s",),
    "transfer": ("keys", "size"),
}
OPTIONAL_PARAMS = {("transfer", "size")}


@dataclass(frozen=True)
class BufferNames:
    """Where the control plane keeps the definitions in Redis (the service reads the same)."""

    prefix: str

    @property
    def definitions(self) -> str:
        """Hash: a buffer's service name → its definition as JSON."""
        return f"{self.prefix}:buffers:definitions"

    @property
    def changed(self) -> str:
        """Channel: the service name of a definition just written or withdrawn."""
        return f"{self.prefix}:buffers:changed"


def build_trigger(kind: str, params: Mapping[str, Any]) -> Trigger:
    """The trigger primitive a definition describes (the constructor's own checks apply)."""
    if kind == "data_key":
        return DataKeyTrigger(n=params["n"], size=params["size"], keys=params["keys"])
    if kind == "object_key":
        return ObjectKeyTrigger(key=params["key"])
    if kind == "time":
        period = params["period_s"]
        if isinstance(period, bool):
            raise TriggerError(f"period: expected a positive number of seconds, got {period!r}")
        return TimeTrigger(period=period)
    if kind == "transfer":
        return TransferTrigger(keys=params["keys"], size=params.get("size", 1))
    raise TriggerError(f"kind: expected one of {', '.join(TRIGGER_PARAMS)}, got {kind!r}")


def trigger_params(trigger: Trigger) -> dict[str, Any]:
    """``build_trigger``'s inverse: the parameters that rebuild ``trigger``."""
    if isinstance(trigger, DataKeyTrigger):
        return {"n": trigger.n, "size": trigger.size, "keys": list(trigger.keys)}
    if isinstance(trigger, ObjectKeyTrigger):
        return {"key": trigger.key}
    if isinstance(trigger, TimeTrigger):
        return {"period_s": trigger.period}
    if isinstance(trigger, TransferTrigger):
        return {"keys": [list(stage) for stage in trigger.stages], "size": trigger.size}
    return {}


class CountedOnly:
    """A firing nobody receives here: counted in the buffer's stats and polled from there (a
    blank target; ``@actors`` outside a running ``Workflow``)."""

    def pass_message(self, message: Firing) -> None:
        return None


def passer_for_target(target: str) -> MessagePasser:
    """Where a stored trigger's firings go: a ZeroMQ address, or counted only."""
    if target.startswith(TARGET_SCHEMES):
        return RemotePasser(target)
    if target not in ("", ACTORS_TARGET):
        raise TriggerError(f"target: expected blank, {ACTORS_TARGET} or a tcp:// or ipc:// address")
    return CountedOnly()


def buffer_from_definition(definition: Mapping[str, Any]) -> ExperienceBuffer:
    """The buffer a definition describes, its triggers bound by their names."""
    buffer = ExperienceBuffer(
        str(definition["name"]),
        Schema(definition["schema"]),
        int(definition["capacity"]),
        eviction=str(definition.get("eviction", "fifo")),
        prioritised=bool(definition.get("prioritised", False)),
    )
    for trigger in definition.get("triggers", ()):
        primitive = build_trigger(str(trigger["kind"]), trigger.get("params") or {})
        buffer.bind(str(trigger["name"]), primitive, passer_for_target(trigger.get("target", "")))
    return buffer
