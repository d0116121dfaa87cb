"""Buffer requests and answers the sync and async clients share (artos §4: declare a buffer or a
whole workflow's buffers and triggers, push experience, gather, sample, update priorities, read
stats). The clients only do I/O; shapes live here, as ``loom.protocol`` does for actions.

Records go as JSON lists: numpy arrays and torch tensors are converted with their ``tolist()``
(the SDK itself needs neither), token fields as one list of ids per step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from loom.protocol import API_PREFIX, Request

BUFFERS = f"{API_PREFIX}/buffers"


@dataclass(frozen=True)
class Buffer:
    """A buffer definition as Loom stores it."""

    id: int
    job: int
    name: str
    schema: dict[str, Any]
    capacity: int
    eviction: str
    sampler: str
    sync_mode: str
    prioritised: bool
    triggers: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    service_name: str = ""

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> Buffer:
        return cls(
            id=int(body["id"]),
            job=int(body["job"]),
            name=str(body["name"]),
            schema=dict(body["schema"]),
            capacity=int(body["capacity"]),
            eviction=str(body["eviction"]),
            sampler=str(body["sampler"]),
            sync_mode=str(body["sync_mode"]),
            prioritised=bool(body["prioritised"]),
            triggers=list(body.get("triggers", [])),
            config=dict(body.get("config") or {}),
            service_name=str(body.get("service_name", "")),
        )


@dataclass(frozen=True)
class Sample:
    """A sampled batch: ``records`` per data key, the ``slots`` they came from and, for a
    prioritised buffer, the importance-sampling ``weights`` (pass ``slots`` back with the TD
    errors to ``update_priorities``). An n-step buffer adds ``n_step`` (``returns``,
    ``discounts``, ``steps``, ``last_slots``, ``last``: the ``last_keys`` at each sum's last
    step); a FIFO-per-actor one the ``actor`` and its ``steps``, in order."""

    slots: list[int]
    records: dict[str, Any]
    weights: list[float] | None = None
    n_step: dict[str, Any] | None = None
    actor: str | None = None
    steps: list[int] | None = None


def trigger(
    name: str, kind: str, *, target: str = "", enabled: bool = True, **params: Any
) -> dict[str, Any]:
    """One trigger's definition, its parameters as the primitive takes them (artos Table 3):
    ``trigger("learn", "data_key", n=4, size=128, keys=["obs", "reward"])``,
    ``trigger("sync", "object_key", key="model_param")``, ``trigger("tick", "time",
    period_s=5)``, ``trigger("send", "transfer", keys=[["obs"], ["reward"]], size=64)``."""
    return {"name": name, "kind": kind, "params": params, "target": target, "enabled": enabled}


def declare_request(
    *,
    name: str,
    schema: Mapping[str, Any],
    capacity: int,
    eviction: str | None = None,
    sampler: str | None = None,
    sync_mode: str | None = None,
    prioritised: bool | None = None,
    triggers: Sequence[Mapping[str, Any]] = (),
    config: Mapping[str, Any] | None = None,
    job: int | None = None,
) -> Request:
    """Declare one buffer; what is left out the server fills in (on-policy: keep unsampled,
    full batch; off-policy: FIFO, uniform)."""
    body: dict[str, Any] = {
        "name": name,
        "schema": _plain(schema),
        "capacity": capacity,
        "triggers": [dict(t) for t in triggers],
    }
    optional = {
        "eviction": eviction,
        "sampler": sampler,
        "sync_mode": sync_mode,
        "prioritised": prioritised,
        "config": dict(config) if config is not None else None,
        "job": job,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return Request("POST", f"{BUFFERS}/", json=body)


def declare_workflow_request(definition: Any, job: int | None = None) -> Request:
    """A workflow's buffers and triggers at once, all or none: a ``Workflow`` (anything with
    ``to_json()``) or what its ``to_json()`` returned."""
    if hasattr(definition, "to_json"):
        definition = definition.to_json()
    body: dict[str, Any] = {
        "buffers": _plain(definition.get("buffers", [])),
        "triggers": _plain(definition.get("triggers", [])),
    }
    if job is not None:
        body["job"] = job
    return Request("POST", f"{BUFFERS}/workflow/", json=body)


def list_request() -> Request:
    return Request("GET", f"{BUFFERS}/", params={"page_size": 1000})


def next_page(response: httpx.Response) -> tuple[list[Buffer], Request | None]:
    """One page of a listing and the request for the next (None after the last)."""
    body = response.json()
    page = [Buffer.from_api(item) for item in body["results"]]
    return page, Request("GET", body["next"]) if body.get("next") else None


def get_request(buffer_id: int) -> Request:
    return Request("GET", f"{BUFFERS}/{buffer_id}/")


def delete_request(buffer_id: int) -> Request:
    return Request("DELETE", f"{BUFFERS}/{buffer_id}/")


def push_request(buffer_id: int, actor: str, records: Mapping[str, Any]) -> Request:
    body = {"actor": actor, "records": {key: _plain(value) for key, value in records.items()}}
    return Request("POST", f"{BUFFERS}/{buffer_id}/records/", json=body)


def gather_request(
    buffer_id: int, slices: Mapping[str, tuple[int, int]], keys: Iterable[str] = ()
) -> Request:
    body = {
        "slices": {actor: [int(start), int(stop)] for actor, (start, stop) in slices.items()},
        "keys": list(keys),
    }
    return Request("POST", f"{BUFFERS}/{buffer_id}/gather/", json=body)


def sample_request(
    buffer_id: int,
    batch_size: int | None = None,
    keys: Iterable[str] = (),
    *,
    n: int | None = None,
    gamma: float | None = None,
    reward_key: str | None = None,
    done_key: str | None = None,
    last_keys: Iterable[str] = (),
    actor: str | None = None,
) -> Request:
    """A sample with the buffer's sampler. n-step needs ``n``, ``gamma``, ``reward_key`` and
    ``done_key`` (``last_keys``: read at each sum's last step, e.g. ``next_obs``); FIFO per
    actor takes ``actor`` (that actor's next steps) and ``batch_size`` as the most steps."""
    body: dict[str, Any] = {"keys": list(keys)}
    optional = {
        "batch_size": batch_size,
        "n": n,
        "gamma": gamma,
        "reward_key": reward_key,
        "done_key": done_key,
        "last_keys": list(last_keys) or None,
        "actor": actor,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return Request("POST", f"{BUFFERS}/{buffer_id}/sample/", json=body)


def priorities_request(buffer_id: int, slots: Sequence[int], td_errors: Any) -> Request:
    body = {"slots": [int(s) for s in _plain(slots)], "td_errors": _plain(td_errors)}
    return Request("POST", f"{BUFFERS}/{buffer_id}/priorities/", json=body)


def stats_request(buffer_id: int) -> Request:
    return Request("GET", f"{BUFFERS}/{buffer_id}/stats/")


def parse_buffer(response: httpx.Response) -> Buffer:
    return Buffer.from_api(response.json())


def parse_buffers(response: httpx.Response) -> list[Buffer]:
    return [Buffer.from_api(item) for item in response.json()]


def parse_sample(response: httpx.Response) -> Sample:
    body = response.json()
    return Sample(
        slots=body["slots"],
        records=body["records"],
        weights=body.get("weights"),
        n_step=body.get("n_step"),
        actor=body.get("actor"),
        steps=body.get("steps"),
    )


def _plain(value: Any) -> Any:
    """Arrays and tensors (anything with ``tolist()``) as lists, containers recursively."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
