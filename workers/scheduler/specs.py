"""Translate between the store's records, the Tangram core's specs and the agents' dispatches."""

from __future__ import annotations

import logging
import time
from typing import Any

from workers.algorithms.tangram import ActionSpec, Assignment, Elasticity, ResourceDemand
from workers.scheduler.records import ActionRecord
from workers.transport import ActionsSubmitted, ApiRequestSpec, Dispatch
from workers.transport.messages import ActionKind as DispatchKind

log = logging.getLogger("loom.scheduler")


def spec_id(action_id: int) -> str:
    return str(action_id)


def resource_demand(name: str, entry: dict[str, Any]) -> ResourceDemand:
    """``{"min": a, "max": b}`` or ``{"units": [...]}`` (validated by the API already)."""
    if "units" in entry:
        return ResourceDemand.one_of([int(u) for u in entry["units"]])
    minimum = int(entry["min"])
    maximum = int(entry.get("max", minimum))
    return (
        ResourceDemand.exactly(minimum)
        if minimum == maximum
        else ResourceDemand.between(minimum, maximum)
    )


def action_spec(record: ActionRecord) -> ActionSpec:
    """The Tangram formulation of an action (arl-tangram §4.1, Eq. 1)."""
    resources = {name: resource_demand(name, entry) for name, entry in record.demand.items()}
    elasticity: Elasticity | None = None
    key_resource: str | None = None
    if record.elasticity:
        key_resource = str(record.elasticity["resource"])
        efficiency = [float(e) for e in record.elasticity["efficiency"]]
        max_units = resources[key_resource].maximum
        points = {units: e for units, e in enumerate(efficiency, start=1)}
        elasticity = Elasticity.from_points(points, max_units)
    elif "cpu" in resources:
        key_resource = "cpu"
    elif "gpu" in resources:
        key_resource = "gpu"
    return ActionSpec(
        action_id=spec_id(record.action_id),
        resources=resources,
        tool=record.tool,
        key_resource=key_resource,
        elasticity=elasticity,
        t1=record.single_unit_duration_s,
        trajectory_id=str(record.trajectory_id) if record.trajectory_id is not None else None,
        service=record.service,
    )


def allocation_json(assignment: Assignment) -> dict[str, Any]:
    """What the database and the dashboard keep of an assignment."""
    return {
        "node": assignment.node,
        "units": dict(assignment.units),
        "cores": list(assignment.core_ids),
        "gpus": list(assignment.gpu_ids),
        "dop": assignment.dop,
        "expected_seconds": round(assignment.expected_seconds, 6),
    }


def dispatch_kind(record: ActionRecord) -> DispatchKind:
    """``noop`` for a CPU action with nothing to run (no command, no tool command template).

    Such an action holds its allocation for no time: the agent answers it inline, without a
    process. It is how the control plane's own overhead is measured (``bench/overhead.py``), and it
    keeps a command-less submission from ever reaching an executor that needs a command.
    """
    if record.kind == "cpu" and not (record.command or "").strip():
        return "noop"
    return record.kind


def dispatch_for(
    record: ActionRecord, *, attempt: int, cores: tuple[int, ...], gpus: tuple[int, ...] = ()
) -> Dispatch:
    kind = dispatch_kind(record)
    api = None
    if record.kind == "api":
        request = record.api_request or {}
        api = ApiRequestSpec(
            method=str(request.get("method", "GET")),
            url=str(request["url"]),
            headers={str(k): str(v) for k, v in (request.get("headers") or {}).items()},
            json_body=request.get("json"),
            timeout_s=float(request.get("timeout_s", record.timeout_s)),
        )
    memory = record.demand.get("memory_mb", {})
    return Dispatch(
        action_id=spec_id(record.action_id),
        attempt=attempt,
        job_id=str(record.job_id),
        kind=kind,
        trajectory_id=str(record.trajectory_id) if record.trajectory_id is not None else None,
        command=record.command if kind == "cpu" else None,
        cores=cores,
        memory_mb=int(memory.get("max", memory.get("min", 0)) or 0)
        if isinstance(memory, dict)
        else 0,
        timeout_s=record.timeout_s,
        env=dict(record.env),
        api=api,
        retry_on_redelivery=record.idempotent,
        dispatched_at=time.time(),
        network=record.network,
        gpus=gpus if kind == "gpu" else (),
        service=record.service if kind == "gpu" else None,
        request=record.request if kind == "gpu" else None,
        priority=record.priority if kind == "gpu" else 0,
    )


def carried_records(message: ActionsSubmitted) -> dict[int, ActionRecord]:
    """The records a submission carries; one that does not parse is loaded from the store."""
    records = {}
    for raw in message.records:
        try:
            record = ActionRecord(**raw)
        except TypeError:
            log.warning(
                "a submitted record does not parse; loading action %s", raw.get("action_id")
            )
            continue
        records[record.action_id] = record
    return records
