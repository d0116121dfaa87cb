"""Stream and consumer-group names, in one place.

Layout (``prefix`` defaults to ``loom``):

- ``{prefix}:dispatch:{node_id}`` — one per node. Scheduler → agent: Dispatch, Cancel,
  TrajectoryEnd. Consumer group ``agents``; each agent process reads as consumer
  ``{node_id}:{instance}``, so a replacement agent for the same node reclaims (XAUTOCLAIM) what a
  dead instance left pending.
- ``{prefix}:events:{pool}`` — one per pool. Agent → scheduler: ActionResult, NodeRegister,
  Heartbeat. Consumer group ``scheduler``; the pool's scheduler reads as consumer
  ``scheduler:{instance}`` and acknowledges once the event is applied (and, for results, persisted).

Both are trimmed by their consumers' acknowledgements (``Transport.trim``): what the group
acknowledged goes, what is pending or not yet read stays. The dispatch stream of a node that went
away therefore keeps its unread entries — the dispatches and cancels sent before the scheduler
noticed: the scheduler's node-loss handling has already decided those actions' fate (retried
elsewhere or ended ``agent_lost``), and an agent that comes back for the node reads the cancels
and reclaims what its dead instance left pending. Nothing trims them while no agent acknowledges
them; removing a node for good is where its stream can go. Dashboard and pool pushes use the
channel layer and pub/sub, not streams.
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
