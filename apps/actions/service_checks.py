"""Submission checks for an action that names a GPU service (arl-tangram §5.3).

A service action runs on one buddy chunk of its service's GPUs, so its demand is GPU units
among the service's chunk sizes, in a GPU pool. Its ``request`` is checked here against what
the service's registry entry allows (``max_sequences``, ``max_tokens``, ``vocab_size``) and
against the shape the GPU agent's backends take (``input_ids``: token-id lists;
``workers/agents/gpu``), so a request the service would refuse is a 400 naming the field at
submission, never an action accepted only to fail on the GPU.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.core.demand import Demand
from apps.resources.models import PoolKind, Service
from apps.resources.service_rules import efficiency_curve


def service_default_demand(service: Service) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The demand (and elasticity) of a service action that gives none: any of the service's
    chunk sizes, with the efficiency its throughput implies (None when it declares none)."""
    sizes = sorted(service.allowed_dop or [1])
    curve = efficiency_curve(service.throughput or {}, sizes[-1])
    elasticity = {"resource": "gpu", "efficiency": curve} if curve is not None else None
    return {"gpu": {"units": sizes}}, elasticity


def check_service_action(
    *, service: Service, demand: Demand, pool_kind: str | None, request: Any
) -> None:
    """Raise a ValidationError naming each field a service action gets wrong."""
    errors: dict[str, Any] = {}
    sizes = sorted(service.allowed_dop or [1])
    other = sorted(set(demand.resources) - {"gpu"})
    if "gpu" not in demand.resources or other:
        errors["demand"] = [
            f"an action of service {service.name!r} asks for gpu units only "
            f"(one of its chunk sizes {sizes}); remove {other[0]!r}"
            if other
            else f"an action of service {service.name!r} asks for gpu units in {sizes}"
        ]
    else:
        gpu = demand.resources["gpu"]
        counts = gpu.units or tuple(range(gpu.minimum, gpu.maximum + 1))
        wrong = [count for count in counts if count not in sizes]
        if wrong:
            errors["demand"] = {
                "gpu": [f"{wrong[0]} GPUs is not a chunk size of service {service.name!r}: {sizes}"]
            }
    if pool_kind is None:
        errors["pool"] = [f"no GPU pool runs service {service.name!r}: name one"]
    elif pool_kind != PoolKind.GPU:
        errors["pool"] = [f"a service action runs in a GPU pool, not a {pool_kind} pool"]
    if (request_errors := _request_errors(service, request)) is not None:
        errors["request"] = request_errors
    if errors:
        raise serializers.ValidationError(errors)


def _request_errors(service: Service, request: Any) -> Any:
    """What is wrong with ``request`` for ``service``, as a field tree; None if nothing."""
    if not isinstance(request, dict):
        return [f'service {service.name!r} needs a request: {{"input_ids": [[token ids], ...]}}']
    sequences = request.get("input_ids")
    if not isinstance(sequences, list) or not sequences:
        return {"input_ids": ["a non-empty list of token-id lists is required"]}
    if service.max_sequences is not None and len(sequences) > service.max_sequences:
        return {
            "input_ids": [
                f"{len(sequences)} sequences; service {service.name!r} takes at most "
                f"{service.max_sequences} per request"
            ]
        }
    for index, sequence in enumerate(sequences):
        if (
            not isinstance(sequence, list)
            or not sequence
            or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in sequence)
        ):
            return {f"input_ids[{index}]": ["a non-empty list of non-negative token ids"]}
        if service.vocab_size is not None and max(sequence) >= service.vocab_size:
            return {
                f"input_ids[{index}]": [
                    f"token id {max(sequence)} is outside service {service.name!r}'s "
                    f"vocabulary (ids below {service.vocab_size})"
                ]
            }
        if service.max_tokens is not None and len(sequence) > service.max_tokens:
            return {
                f"input_ids[{index}]": [
                    f"{len(sequence)} tokens; service {service.name!r} takes at most "
                    f"{service.max_tokens} per sequence"
                ]
            }
    return None
