"""Writes for nodes: agent registration, heartbeats, and draining by an operator."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.core.live import Change, changed_on_commit
from apps.jobs.authentication import NODE_TOKEN_PREFIX, hash_key
from apps.jobs.services import generate_raw_key
from apps.resources.models import Node, NodeStatus, ResourcePool


def capacity_totals(capacity: dict[str, Any]) -> dict[str, int]:
    """The scalar columns a Node keeps beside its full capacity layout."""
    gpus = capacity.get("gpus", [])
    return {
        "cores": capacity["cores"],
        "memory_mb": capacity["memory_mb"],
        "gpus": len(gpus),
        "gpu_memory_mb": sum(gpu["memory_mb"] for gpu in gpus),
    }


@transaction.atomic
def node_register(
    *,
    name: str,
    pool: ResourcePool,
    capacity: dict[str, Any],
    address: str = "",
    agent_version: str = "",
) -> tuple[Node, str]:
    """Register (or re-register) a node; returns it and a fresh node token (shown once).

    Re-registering under the same name updates the capacity and rotates the token, so an agent
    that restarts on a reinstalled machine simply registers again.
    """
    raw_token = generate_raw_key(NODE_TOKEN_PREFIX)
    node, _ = Node.objects.update_or_create(
        name=name,
        defaults={
            "pool": pool,
            "capacity": capacity,
            **capacity_totals(capacity),
            "address": address,
            "agent_version": agent_version,
            "status": NodeStatus.ONLINE,
            "token_prefix": raw_token[:12],
            "token_hash": hash_key(raw_token),
            "last_heartbeat_at": timezone.now(),
        },
    )
    return node, raw_token


def node_heartbeat(
    *, node: Node, usage: dict[str, Any], status: NodeStatus | str | None = None
) -> Node:
    """Record a heartbeat: the node is alive (online unless draining) and its current usage."""
    node.usage = usage
    node.last_heartbeat_at = timezone.now()
    fields = ["usage", "last_heartbeat_at"]
    if status is not None:
        node.status = status
        fields.append("status")
    elif node.status == NodeStatus.OFFLINE:
        node.status = NodeStatus.ONLINE
        fields.append("status")
    node.save(update_fields=fields)
    return node


class NodeNotDrainable(ValueError):
    """Only an online node drains and only a draining one resumes (an offline one does neither)."""


def node_set_draining(*, node: Node, draining: bool) -> Node:
    """Drain (no new allocations; running actions finish) or resume a node; shown live once
    committed.

    A conditional update: an offline node cannot be drained or resumed, and two operators
    clicking at once leave it in one well-defined state.
    """
    source = NodeStatus.ONLINE if draining else NodeStatus.DRAINING
    target = NodeStatus.DRAINING if draining else NodeStatus.ONLINE
    with transaction.atomic():
        changed = Node.objects.filter(pk=node.pk, status__in=[source, target]).update(status=target)
        if changed != 1:
            raise NodeNotDrainable(f"node is {node.status}; only online nodes drain")
        node.refresh_from_db()
        changed_on_commit([Change("node", str(node.pk))])
    return node
