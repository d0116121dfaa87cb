"""What a registered GPU service may declare (arl-tangram §5.3): one set of rules, shared by the
REST API (``ServiceSerializer``) and the admin (``Service.clean``), so both answer the same
error naming the same field.

A service runs on buddy chunks of 1, 2, 4 or 8 GPUs (``allowed_dop``, its chunk sizes); its
elasticity is its throughput at each of those sizes (requests per second, declared by the
operator or measured), from which the scheduler's efficiency curve follows; the largest request
it accepts (sequences per request, tokens per sequence, token ids below its vocabulary size) is
what its agent's backend checks, so an oversized request is refused at submission instead of
failing on the GPU; pre-deployment hints say how many chunks of which size to keep warm, and
where.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

CHUNK_SIZES = (1, 2, 4, 8)  # the GPU manager's buddy sizes (arl-tangram §5.3)
MAX_REQUEST_LIMIT = 1_000_000_000
MAX_THROUGHPUT = 1e9
PREDEPLOY_KEYS = ("replicas", "chunk_size", "nodes")
MAX_PREDEPLOY_REPLICAS = 1024

Errors = dict[str, list[str]]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def chunk_sizes_errors(value: Any) -> list[str]:
    """``allowed_dop``: a non-empty subset of 1, 2, 4, 8, each once."""
    if not isinstance(value, list) or not value or not all(_is_int(size) for size in value):
        return ["must be a non-empty list of chunk sizes (1, 2, 4 or 8 GPUs)"]
    wrong = [size for size in value if size not in CHUNK_SIZES]
    if wrong:
        return [f"{wrong[0]} is not a chunk size; chunks are 1, 2, 4 or 8 GPUs"]
    if len(set(value)) != len(value):
        return ["must not repeat a chunk size"]
    return []


def throughput_errors(value: Any, sizes: list[int]) -> list[str]:
    """``throughput``: requests per second at chunk sizes the service runs on (keys as strings,
    JSON's only key type), each positive and finite."""
    if not isinstance(value, Mapping):
        return ['must map chunk sizes to requests per second, e.g. {"1": 4.0, "2": 7.5}']
    for key, rate in value.items():
        if not str(key).isdigit() or int(key) not in sizes:
            return [f"{key!r} is not one of this service's chunk sizes {sizes}"]
        if (
            isinstance(rate, bool)
            or not isinstance(rate, int | float)
            or not math.isfinite(rate)
            or not 0 < rate <= MAX_THROUGHPUT
        ):
            return [f"throughput at {key} GPUs must be a number of requests/s in (0, 1e9]"]
    return []


def predeploy_errors(value: Any, sizes: list[int]) -> list[str]:
    """``predeploy``: ``{replicas, chunk_size, nodes}``, each optional."""
    if not isinstance(value, Mapping):
        return ["must be an object {replicas, chunk_size, nodes}"]
    unknown = sorted(set(value) - set(PREDEPLOY_KEYS))
    if unknown:
        return [f"{unknown[0]!r} is not a hint; hints are {', '.join(PREDEPLOY_KEYS)}"]
    replicas = value.get("replicas", 0)
    if not _is_int(replicas) or not 0 <= replicas <= MAX_PREDEPLOY_REPLICAS:
        return [f"replicas must be an integer in 0..{MAX_PREDEPLOY_REPLICAS}"]
    if "chunk_size" in value and value["chunk_size"] not in sizes:
        return [f"chunk_size must be one of this service's chunk sizes {sizes}"]
    nodes = value.get("nodes", [])
    if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
        return ["nodes must be a list of node names"]
    return []


def limit_errors(value: Any) -> list[str]:
    if value is None:
        return []
    if not _is_int(value) or not 1 <= value <= MAX_REQUEST_LIMIT:
        return [f"must be an integer in 1..{MAX_REQUEST_LIMIT}, or null for no limit"]
    return []


def service_errors(values: Mapping[str, Any]) -> Errors:
    """Every rule over a service's fields (those present in ``values``); field → reasons."""
    errors: Errors = {}
    sizes = values.get("allowed_dop", [1])
    if problems := chunk_sizes_errors(sizes):
        errors["allowed_dop"] = problems
        sizes = list(CHUNK_SIZES)  # check the rest against any buddy size
    if problems := throughput_errors(values.get("throughput", {}), sizes):
        errors["throughput"] = problems
    if problems := predeploy_errors(values.get("predeploy", {}), sizes):
        errors["predeploy"] = problems
    for name in ("max_sequences", "max_tokens", "vocab_size"):
        if problems := limit_errors(values.get(name)):
            errors[name] = problems
    return errors


def efficiency_curve(throughput: Mapping[str, float], max_units: int) -> list[float] | None:
    """The elasticity E(m), m = 1..max_units, that a service's throughput implies (arl-tangram
    §4.1: ``T(m) = T1 / (E(m)·m)``, so E(m) = throughput(m) / (m · throughput(1))); sizes
    between declared ones take the last declared value's efficiency. None without a throughput
    at one GPU (no base to compare with)."""
    rates = {int(size): float(rate) for size, rate in throughput.items()}
    if 1 not in rates or max_units < 1:
        return None
    curve = []
    efficiency = 1.0
    for units in range(1, max_units + 1):
        if units in rates:
            efficiency = min(1.0, rates[units] / (units * rates[1]))
        curve.append(round(efficiency, 6))
    return curve
