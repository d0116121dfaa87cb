"""Stream and consumer-group names, in one place.

Layout (``prefix`` defaults to ``loom``):

- ``{prefix}:dispatch:{node_id}`` — one per node. Scheduler → agent: Dispatch, Cancel,
  TrajectoryEnd. Consumer group ``agents``; each agent process reads as consumer
  ``{node_id}:{instance}``, so a replacement agent for the same node reclaims (XAUTOCLAIM) what a
  dead instance left pending.
- ``{prefix}:events:{pool}`` — one per pool. Agent → scheduler: ActionResult, NodeRegister,
  Heartbeat. Consumer group ``scheduler``; the pool's scheduler reads as consumer
  ``scheduler:{instance}`` and acknowledges once the event is applied (and, for results, persisted).
"""

from __future__ import annotations

from dataclasses import dataclass

AGENT_GROUP = "agents"
SCHEDULER_GROUP = "scheduler"


@dataclass(frozen=True)
class StreamNames:
    """Builds stream names under one key prefix (tests use a unique prefix each)."""

    prefix: str = "loom"

    def dispatch(self, node_id: str) -> str:
        return f"{self.prefix}:dispatch:{node_id}"

    def events(self, pool: str) -> str:
        return f"{self.prefix}:events:{pool}"
