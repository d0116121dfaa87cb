"""Each LLM worker's own load, read from its Prometheus ``/metrics`` (Loom's own).

SGLang (with ``--enable-metrics``) and Loom's engines (``workers.engine``, the same names)
report ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``, ``sglang:token_usage`` (the
KV-cache pool's used fraction), ``sglang:num_used_tokens`` and ``sglang:gen_throughput``;
llama.cpp's ``llama-server --metrics`` reports ``llamacpp:requests_processing``,
``llamacpp:requests_deferred``, ``llamacpp:kv_cache_usage_ratio`` and
``llamacpp:kv_cache_tokens``. The router polls them off the request path and publishes them
with its workers on the state stream; an engine without metrics reports None, never a guess.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# Our field → the metric names that carry it, first found wins (SGLang, then llama.cpp).
_SOURCES: dict[str, tuple[str, ...]] = {
    "running_requests": ("sglang:num_running_reqs", "llamacpp:requests_processing"),
    "queued_requests": ("sglang:num_queue_reqs", "llamacpp:requests_deferred"),
    "kv_usage": ("sglang:token_usage", "llamacpp:kv_cache_usage_ratio"),
    "kv_used_tokens": ("sglang:num_used_tokens", "llamacpp:kv_cache_tokens"),
    "generation_tokens_per_s": ("sglang:gen_throughput", "llamacpp:predicted_tokens_seconds"),
}
_COUNTS = ("running_requests", "queued_requests", "kv_used_tokens")


@dataclass(frozen=True)
class EngineMetrics:
    """One worker's reading; a field is None when the engine does not report it."""

    running_requests: int | None = None
    queued_requests: int | None = None
    kv_usage: float | None = None  # 0..1
    kv_used_tokens: int | None = None
    generation_tokens_per_s: float | None = None

    def as_dict(self) -> dict[str, int | float | None]:
        return asdict(self)


def parse_prometheus(text: str) -> dict[str, float]:
    """Sample name → value, summed over label sets (a server with two models reports both)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if "{" in line:  # name{labels} value [timestamp]
            name, _, labelled = line.partition("{")
            rest = labelled.rsplit("}", 1)[-1]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            samples[name] = samples.get(name, 0.0) + value
    return samples


def engine_metrics(text: str) -> EngineMetrics:
    """The fields :class:`EngineMetrics` knows, from one ``/metrics`` answer."""
    samples = parse_prometheus(text)
    found: dict[str, int | float] = {}
    for field, names in _SOURCES.items():
        for name in names:
            if name in samples:
                value = samples[name]
                found[field] = max(0, round(value)) if field in _COUNTS else max(0.0, value)
                break
    return EngineMetrics(**found)  # type: ignore[arg-type]
