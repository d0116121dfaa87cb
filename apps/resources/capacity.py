"""Node capacity as agents report it: cores with their NUMA layout, memory, GPUs."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.api.fields import INT32_MAX, INT64_MAX

MAX_CORES = 16_384
MAX_GPUS = 1024
AGENT_KEYS = ("nvlink_groups", "services", "cache", "backend", "concurrency")


class GpuSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=MAX_GPUS - 1)
    memory_mb = serializers.IntegerField(min_value=1, max_value=INT32_MAX)
    model = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


class CapacitySerializer(serializers.Serializer):
    """``numa``: one list of core ids per NUMA node; together they must cover 0..cores-1."""

    cores = serializers.IntegerField(min_value=0, max_value=MAX_CORES)
    numa = serializers.ListField(
        child=serializers.ListField(
            child=serializers.IntegerField(min_value=0, max_value=MAX_CORES - 1), allow_empty=False
        ),
        required=False,
        max_length=1024,
    )
    memory_mb = serializers.IntegerField(min_value=0, max_value=INT64_MAX)
    gpus = GpuSerializer(many=True, required=False)
    # What a GPU agent registers with the scheduler (arl-tangram §5.3), kept as it sent it so
    # an operator's edit in the admin does not drop it: NVLink groups, hosted services, the
    # service cache; and the agent's backend and concurrency.
    nvlink_groups = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(min_value=0)), required=False
    )
    services = serializers.DictField(child=serializers.DictField(), required=False)
    cache = serializers.ListField(child=serializers.DictField(), required=False)
    backend = serializers.CharField(required=False, max_length=64)
    concurrency = serializers.IntegerField(required=False, min_value=0, max_value=INT32_MAX)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        cores: int = attrs["cores"]
        numa: list[list[int]] = attrs.get("numa") or ([list(range(cores))] if cores else [])
        seen: set[int] = set()
        for node_index, node_cores in enumerate(numa):
            for core in node_cores:
                if core in seen:
                    raise serializers.ValidationError(
                        {"numa": [f"core {core} appears twice (NUMA node {node_index})"]}
                    )
                seen.add(core)
        if seen != set(range(cores)):
            raise serializers.ValidationError(
                {"numa": [f"NUMA nodes must cover cores 0..{cores - 1} exactly once"]}
            )
        gpus = attrs.get("gpus", [])
        if len(gpus) > MAX_GPUS:
            raise serializers.ValidationError({"gpus": [f"at most {MAX_GPUS} GPUs per node"]})
        indexes = [gpu["index"] for gpu in gpus]
        if len(set(indexes)) != len(indexes):
            raise serializers.ValidationError({"gpus": ["GPU indexes must be unique"]})
        kept = {name: attrs[name] for name in AGENT_KEYS if name in attrs}
        return {
            "cores": cores,
            "numa": numa,
            "memory_mb": attrs["memory_mb"],
            "gpus": sorted((dict(gpu) for gpu in gpus), key=lambda gpu: gpu["index"]),
            **kept,
        }
