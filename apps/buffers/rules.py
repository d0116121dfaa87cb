"""What a buffer and its triggers may declare (artos §4.2, Table 3): one set of rules, shared by
the REST API (the serializers of ``apps.buffers.apis``) and the admin (``Buffer.clean``,
``Trigger.clean``), so both answer the same error naming the same field.

The checks are the data plane's own: a schema is built with ``workers.buffers.schema.Schema``
and a trigger with the primitive's constructor (``workers.algorithms.artos``), with its
parameters exactly as that constructor takes them, so a definition stored here is one the
buffer service accepts. On top: dtypes a JSON client can send, the eviction policies by name,
data keys a trigger names must be keys of its buffer, and on-policy data is never evicted
unsampled (artos §4.2: the learner must see every step of the iteration).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workers.algorithms.artos import (
    DataKeyTrigger,
    TransferTrigger,
    Trigger,
    TriggerError,
)
from workers.buffers.definitions import (
    ACTORS_TARGET,
    OPTIONAL_PARAMS,
    TARGET_SCHEMES,
    TRIGGER_PARAMS,
    build_trigger,
)
from workers.buffers.schema import Schema, SchemaError

Errors = dict[str, list[str]]

DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
EVICTIONS = ("fifo", "reservoir", "keep_unsampled")
MAX_CAPACITY = 100_000_000
MAX_DIMENSION = 1 << 20


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _split(message: str) -> tuple[str, str]:
    """The data plane's errors start with the field's name: ``"obs: dtype float64 != …"``."""
    field, sep, reason = message.partition(": ")
    return (field, reason) if sep and " " not in field else ("", message)


def schema_errors(value: Any) -> Errors:
    """``schema``: ``{key: {"shape": [...], "dtype": ..., "max_len": ...}}``; fields named
    ``schema.<key>`` (or ``schema`` for the whole)."""
    if not isinstance(value, Mapping) or not value:
        return {"schema": ['must map data keys to {"shape": [...], "dtype": "float32"}']}
    errors: Errors = {}
    for key, spec in value.items():
        field = f"schema.{key}"
        if not isinstance(spec, Mapping):
            errors[field] = ['must be {"shape": [...], "dtype": ...}']
            continue
        unknown = sorted(set(spec) - {"shape", "dtype", "max_len"})
        if unknown:
            errors[field] = [f"{unknown[0]!r} is not a field spec's part (shape, dtype, max_len)"]
            continue
        dtype, shape = spec.get("dtype"), spec.get("shape")
        if dtype not in DTYPES:
            errors[f"{field}.dtype"] = [f"unknown dtype {dtype!r}; one of {', '.join(DTYPES)}"]
        elif not isinstance(shape, list) or not (
            shape == [None] or all(_is_int(d) and 1 <= d <= MAX_DIMENSION for d in shape)
        ):
            errors[f"{field}.shape"] = [
                f"must be a list of positive integers (or [null] for tokens), got {shape!r}"
            ]
        elif spec.get("max_len") is not None and shape != [None]:
            errors[f"{field}.max_len"] = ["only a token field ([null] shape) has max_len"]
    if errors:
        return errors
    try:
        Schema({k: dict(v) for k, v in value.items()})
    except SchemaError as error:
        field, reason = _split(str(error))
        return {f"schema.{field}" if field and field != "fields" else "schema": [reason]}
    return {}


def trigger_data_keys(trigger: Trigger) -> tuple[str, ...]:
    """The buffer keys a trigger reads (an object key is model data, not a schema key)."""
    if isinstance(trigger, DataKeyTrigger):
        return trigger.keys
    if isinstance(trigger, TransferTrigger):
        return tuple(key for stage in trigger.stages for key in stage)
    return ()


def target_errors(value: Any) -> list[str]:
    """``target``: where firings go. Blank: polled through stats; ``@actors``: invoke the
    workflow's elastic actors; a ZeroMQ address: sent remotely (artos §4.2 message passing)."""
    if value in ("", None, ACTORS_TARGET):
        return []
    if not isinstance(value, str) or not value.startswith(TARGET_SCHEMES) or len(value) > 300:
        return [f"must be blank, {ACTORS_TARGET!r} or a tcp:// or ipc:// address, got {value!r}"]
    return []


def trigger_errors(
    kind: Any, params: Any, target: Any = "", schema: Mapping[str, Any] | None = None
) -> Errors:
    """One trigger; ``schema`` (the buffer's, when valid) checks the data keys it names."""
    if kind not in TRIGGER_PARAMS:
        return {"kind": [f"expected one of {', '.join(TRIGGER_PARAMS)}, got {kind!r}"]}
    errors: Errors = {}
    if problems := target_errors(target):
        errors["target"] = problems
    if not isinstance(params, Mapping):
        errors["params"] = [f"must be an object with {', '.join(TRIGGER_PARAMS[kind])}"]
        return errors
    allowed = TRIGGER_PARAMS[kind]
    for name in params:
        if name not in allowed:
            errors[f"params.{name}"] = [f"not a parameter of {kind} ({', '.join(allowed)})"]
    for name in allowed:
        if name not in params and (kind, name) not in OPTIONAL_PARAMS:
            errors[f"params.{name}"] = ["this field is required"]
    if errors:
        return errors
    try:
        trigger = build_trigger(kind, params)
    except TriggerError as error:
        field, reason = _split(str(error))
        if kind == "time" and field == "period":
            field = "period_s"
        return {f"params.{field}" if field else "params": [reason]}
    if schema:
        unknown = [key for key in trigger_data_keys(trigger) if key not in schema]
        if unknown:
            keys = ", ".join(schema)
            errors["params.keys"] = [f"{unknown[0]!r} is not a key of this buffer ({keys})"]
    return errors


def buffer_errors(values: Mapping[str, Any]) -> Errors:
    """A buffer's own fields (those present in ``values``): schema, capacity, eviction and how
    they agree with its sampler and synchronisation mode."""
    errors: Errors = {}
    if "schema" in values:
        errors.update(schema_errors(values["schema"]))
    if "capacity" in values:
        capacity = values["capacity"]
        if not _is_int(capacity) or not 1 <= capacity <= MAX_CAPACITY:
            errors["capacity"] = [f"must be an integer in 1..{MAX_CAPACITY}, got {capacity!r}"]
    eviction = values.get("eviction", "keep_unsampled")
    if eviction not in EVICTIONS:
        errors["eviction"] = [f"expected one of {', '.join(EVICTIONS)}, got {eviction!r}"]
    elif values.get("sync_mode") == "on_policy" and eviction != "keep_unsampled":
        errors["eviction"] = [
            "an on-policy buffer never drops data the learner has not sampled: keep_unsampled"
        ]
    return errors


def definition_errors(buffer: Mapping[str, Any], triggers: Sequence[Mapping[str, Any]]) -> Errors:
    """A buffer with its triggers, as one definition: trigger errors under ``triggers[i]``."""
    errors = buffer_errors(buffer)
    schema = buffer.get("schema") if not any(f.startswith("schema") for f in errors) else None
    names: set[Any] = set()
    for index, trigger in enumerate(triggers):
        prefix = f"triggers[{index}]"
        name = trigger.get("name")
        if name in names:
            errors[f"{prefix}.name"] = [f"trigger {name!r} declared twice on this buffer"]
        names.add(name)
        found = trigger_errors(
            trigger.get("kind"), trigger.get("params"), trigger.get("target", ""), schema
        )
        errors.update({f"{prefix}.{field}": reasons for field, reasons in found.items()})
    return errors


def with_defaults(values: Mapping[str, Any]) -> tuple[dict[str, Any], Errors]:
    """Fill what a declaration may leave out, as ``Workflow.to_json`` leaves it out.

    On-policy buffers keep unsampled data and are sampled whole (PPO); off-policy ones evict
    FIFO and sample uniformly (SAC, DQN); ``prioritised`` (to_json's flag) is the PER sampler.
    """
    out = dict(values)
    prioritised = out.pop("prioritised", None)
    eviction, sync_mode = out.get("eviction"), out.get("sync_mode")
    if sync_mode is None:
        sync_mode = "on_policy" if eviction in (None, "keep_unsampled") else "off_policy"
    if eviction is None:
        eviction = "keep_unsampled" if sync_mode == "on_policy" else "fifo"
    sampler = out.get("sampler")
    if sampler is None:
        default = "full_batch" if sync_mode == "on_policy" else "uniform"
        sampler = "prioritised" if prioritised else default
    errors: Errors = {}
    if prioritised is not None and bool(prioritised) != (sampler == "prioritised"):
        errors["sampler"] = [f"prioritised is {bool(prioritised)} but the sampler is {sampler}"]
    out.update(eviction=eviction, sync_mode=sync_mode, sampler=sampler)
    return out, errors
