"""Reads behind the GPU map (issue 19): per GPU node, which chunk holds which service, per
service its queue and ACT (arl-tangram §5.3, evict-on-execution).

Everything comes from the system of record: ``Node.capacity`` keeps what the GPU agent last
registered or reported in a heartbeat (its GPUs, NVLink groups, hosted services and the service
cache: which service is resident on which chunk, with when it was last used); allocated
``Action`` rows say which chunk each running request holds, and an ended one keeps its agent's
report (``service_timings``: queue, restore and execute seconds; ``cache_events``). What is not
persisted — the transient evicting / restoring moments — is listed under ``missing`` instead of
being guessed.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone

from apps.actions.models import ACTIVE_STATUSES, ALLOCATED_STATUSES, Action, ActionStatus
from apps.metrics.measures import allocation_units
from apps.metrics.stats import act_stats, seconds_between
from apps.resources.models import Node, PoolKind, ResourcePool, Service

# Completions per service the ACT and phase figures are computed from (newest first).
SERVICE_SAMPLE = 500

MISSING = [
    "evicting / restoring as they happen: only the cache the agent last reported is stored, so "
    "a chunk shows 'restoring' only while an allocated request holds it and its service was not "
    "resident there at that report",
]


def gpu_pools(name: str | None = None) -> list[ResourcePool]:
    """GPU pools (all of them, or the one named): pools of kind ``gpu`` or with GPU nodes."""
    pools = ResourcePool.objects.filter(Q(kind=PoolKind.GPU) | Q(nodes__gpus__gt=0)).distinct()
    if name is not None:
        pools = pools.filter(name=name)
    return list(pools.order_by("name"))


def _int_list(values: Any) -> list[int]:
    if not isinstance(values, list):
        return []
    return [int(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]


def _gpus(node: Node) -> list[dict[str, Any]]:
    capacity = node.capacity if isinstance(node.capacity, dict) else {}
    listed = [gpu for gpu in capacity.get("gpus") or () if isinstance(gpu, dict)]
    if listed:
        return [
            {
                "index": int(gpu.get("index", i)),
                "memory_mb": int(gpu.get("memory_mb", 0) or 0),
                "model": str(gpu.get("model", "") or ""),
            }
            for i, gpu in enumerate(listed)
        ]
    per_gpu = node.gpu_memory_mb // node.gpus if node.gpus else 0
    return [{"index": i, "memory_mb": per_gpu, "model": ""} for i in range(node.gpus)]


def _cache(node: Node, now: datetime) -> list[dict[str, Any]]:
    """The resident instances the agent last reported, least recently used first."""
    capacity = node.capacity if isinstance(node.capacity, dict) else {}
    out = []
    for entry in capacity.get("cache") or ():
        if not isinstance(entry, dict) or "service" not in entry:
            continue
        try:
            start, size = int(entry["start"]), int(entry["size"])
            last_used = float(entry.get("last_used", 0.0))
        except (KeyError, TypeError, ValueError):
            continue
        out.append(
            {
                "service": str(entry["service"]),
                "start": start,
                "size": size,
                "last_used": last_used or None,
                "idle_s": max(0.0, now.timestamp() - last_used) if last_used else None,
            }
        )
    return sorted(out, key=lambda instance: instance["last_used"] or 0.0)


def _hosted(node: Node) -> dict[str, dict[str, Any]]:
    capacity = node.capacity if isinstance(node.capacity, dict) else {}
    services = capacity.get("services")
    if not isinstance(services, dict):
        return {}
    hosted: dict[str, dict[str, Any]] = {}
    for name, entry in services.items():
        if not isinstance(entry, dict):
            continue
        if "error" in entry:
            hosted[str(name)] = {"error": str(entry["error"])}
        else:
            hosted[str(name)] = {"sizes": _int_list(entry.get("sizes")), "kind": entry.get("kind")}
    return hosted


def _covers(instance: dict[str, Any], gpu: int) -> bool:
    return bool(instance["start"] <= gpu < instance["start"] + instance["size"])


def chunk_state(
    gpu: int, cache: list[dict[str, Any]], running: list[dict[str, Any]]
) -> dict[str, Any]:
    """One GPU's state: ``busy`` (a request runs on it with its service resident), ``restoring``
    (a request holds it but its service was not resident there at the last report: the agent
    restores it before executing, §5.3), ``warm`` (idle, a service resident) or ``free``."""
    warm = [i["service"] for i in cache if _covers(i, gpu)]
    holder = next((r for r in running if gpu in r["gpus"]), None)
    if holder is not None:
        resident = holder["service"] is not None and any(
            i["service"] == holder["service"]
            and i["start"] == min(holder["gpus"])
            and i["size"] == len(holder["gpus"])
            for i in cache
        )
        state = "busy" if resident or holder["service"] is None else "restoring"
    else:
        state = "warm" if warm else "free"
    return {
        "index": gpu,
        "state": state,
        "warm": warm,
        "action": holder["action"] if holder else None,
        "service": holder["service"] if holder else None,
    }


def _running_by_node(node_ids: Iterable[int], now: datetime) -> dict[int, list[dict[str, Any]]]:
    rows = Action.objects.filter(node_id__in=list(node_ids), status__in=ALLOCATED_STATUSES)
    running: dict[int, list[dict[str, Any]]] = {}
    for action_id, node_id, service, status, allocation, since in rows.values_list(
        "id", "node_id", "service__name", "status", "allocation", "scheduled_at"
    ).order_by("id"):
        running.setdefault(node_id, []).append(
            {
                "action": action_id,
                "service": service,
                "status": status,
                "gpus": allocation_units(allocation, "gpu"),
                "held_s": seconds_between(since, now),
            }
        )
    return running


def node_gpu_view(node: Node, running: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
    cache = _cache(node, now)
    gpus = _gpus(node)
    capacity = node.capacity if isinstance(node.capacity, dict) else {}
    return {
        "id": node.pk,
        "name": node.name,
        "pool": node.pool.name,
        "status": node.status,
        "heartbeat_age_s": seconds_between(node.last_heartbeat_at, now),
        "gpus": gpus,
        "nvlink_groups": [
            _int_list(group) for group in capacity.get("nvlink_groups") or () if group
        ],
        "cache": cache,
        "running": running,
        "cells": [chunk_state(gpu["index"], cache, running) for gpu in gpus],
        "hosted": _hosted(node),
    }


def _mean(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None


def _phase_means(rows: list[tuple[Any, ...]]) -> dict[str, float | None]:
    """Mean wait to be scheduled (submitted → scheduled) and mean time on the agent (started →
    finished: the device queue, the restore when the service was cold, and the run)."""
    return {
        "queueing_mean_s": _mean([seconds_between(s, sch or st) for s, sch, st, *_ in rows]),
        "execution_mean_s": _mean([seconds_between(st, f) for _, _, st, f, *_ in rows]),
    }


def _agent_phases(reports: list[tuple[Any, Any]]) -> dict[str, Any]:
    """From the agents' reports of the same completions, (timings, cache events) each
    (arl-tangram §5.3): how many needed a restore (a ``load`` or ``restore`` event: their service
    was cold on the chunk) with the mean seconds of those restores, and the mean device-queue and
    execute seconds; completions without a report (ended before their agent ran them) are left
    out."""
    reported = [(t, events) for t, events in reports if isinstance(t, dict)]

    def seconds(timings: dict[str, Any], key: str) -> float | None:
        value = timings.get(key)
        return float(value) if isinstance(value, int | float) else None

    def cold(events: Any) -> bool:
        kinds = {e.get("kind") for e in events or () if isinstance(e, dict)}
        return bool(kinds & {"load", "restore"})

    restores = [seconds(t, "restore_s") for t, events in reported if cold(events)]
    return {
        "reported": len(reported),
        "restores": len(restores),
        "restore_mean_s": _mean(restores),
        "agent_queue_mean_s": _mean([seconds(t, "queue_s") for t, _ in reported]),
        "execute_mean_s": _mean([seconds(t, "execute_s") for t, _ in reported]),
    }


def service_rows(services: list[Service], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per service: queued / running requests, ACT of its newest completions, where it is warm."""
    counts: dict[tuple[int, str], int] = {}
    for row in (
        Action.objects.filter(service__in=services, status__in=ACTIVE_STATUSES)
        .values("service_id", "status")
        .annotate(n=Count("id"))
    ):
        counts[row["service_id"], row["status"]] = row["n"]
    out = []
    for service in services:
        rows = list(
            Action.objects.filter(
                service=service, status=ActionStatus.SUCCEEDED, finished_at__isnull=False
            )
            .order_by("-finished_at")
            .values_list(
                "submitted_at",
                "scheduled_at",
                "started_at",
                "finished_at",
                "service_timings",
                "cache_events",
            )[:SERVICE_SAMPLE]
        )
        acts = [seconds_between(s, f) or 0.0 for s, _, _, f, _, _ in rows]
        warm = [
            {"node": node["name"], "start": i["start"], "size": i["size"]}
            for node in nodes
            for i in node["cache"]
            if i["service"] == service.name
        ]
        failed = {
            node["name"]: node["hosted"][service.name]["error"]
            for node in nodes
            if "error" in node["hosted"].get(service.name, {})
        }
        out.append(
            {
                "name": service.name,
                "pool": service.pool.name if service.pool else None,
                "backend": service.backend,
                "task": service.task,
                "allowed_dop": service.allowed_dop,
                "memory_mb": service.memory_mb,
                "queued": counts.get((service.pk, ActionStatus.QUEUED), 0),
                "running": counts.get((service.pk, ActionStatus.SCHEDULED), 0)
                + counts.get((service.pk, ActionStatus.RUNNING), 0),
                "act": act_stats(acts),
                **_phase_means(rows),
                "agent": _agent_phases([(timings, events) for *_, timings, events in rows]),
                "warm": warm,
                "load_failures": failed,
            }
        )
    return out


def gpu_map(pools: list[ResourcePool], now: datetime | None = None) -> dict[str, Any]:
    """The GPU map of ``pools``: their GPU nodes and the services they host or run."""
    now = now or timezone.now()
    nodes = list(
        Node.objects.filter(pool__in=pools)
        .filter(Q(gpus__gt=0) | Q(pool__kind=PoolKind.GPU))
        .select_related("pool")
        .order_by("pool__name", "name")
    )
    running = _running_by_node((node.pk for node in nodes), now)
    views = [node_gpu_view(node, running.get(node.pk, []), now) for node in nodes]
    hosted = {name for view in views for name in view["hosted"]}
    hosted |= {i["service"] for view in views for i in view["cache"]}
    services = list(
        Service.objects.filter(Q(pool__in=pools) | Q(name__in=hosted))
        .select_related("pool")
        .order_by("name")
        .distinct()
    )
    return {
        "t": now.timestamp(),
        "pools": [pool.name for pool in pools],
        "nodes": views,
        "services": service_rows(services, views),
        "missing": MISSING,
    }
