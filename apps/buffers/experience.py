"""The experience operations the REST API offers on a defined buffer (artos §4.1–§4.2): push
records, gather actors' step ranges (pull), sample with the buffer's sampler, update PER
priorities, read stats. Each checks its input against the definition here, so a bad request is
a 400 naming the field before anything crosses to the buffer service, then forwards it
(``apps.buffers.dataplane``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from apps.buffers.dataplane import BufferServiceRefused, call
from apps.buffers.models import Buffer, SamplerKind
from apps.buffers.records import RecordError, arrays_to_json, records_from_json, stored_keys
from workers.buffers.schema import Schema
from workers.buffers.store import N_STEP_PREFIX

N_STEP_REQUIRED = ("n", "gamma", "reward_key", "done_key")
# what each sampler takes beside batch_size and keys; given to another sampler, it is refused
SAMPLER_OPTIONS = {
    SamplerKind.N_STEP: (*N_STEP_REQUIRED, "last_keys"),
    SamplerKind.FIFO_PER_ACTOR: ("actor",),
}
OPTION_OWNER = {name: kind for kind, names in SAMPLER_OPTIONS.items() for name in names}


def schema_of(buffer: Buffer) -> Schema:
    return Schema(buffer.schema)


def records_push(*, buffer: Buffer, actor: str, records: Any) -> dict[str, int]:
    """Append steps of some keys for ``actor``; the triggers this change fired are counted."""
    steps, arrays = records_from_json(schema_of(buffer), records)
    firings = call(lambda client: client.put(buffer.service_name, actor, arrays))
    return {"steps": steps, "firings": firings}


def records_gather(
    *, buffer: Buffer, slices: Mapping[str, tuple[int, int]], keys: Sequence[str]
) -> dict[str, Any]:
    """Steps ``[start, stop)`` of each named actor, in the order given (a DataKeyTrigger's
    firing names exactly these slices)."""
    names = stored_keys(schema_of(buffer), keys)
    arrays = call(lambda client: client.gather(buffer.service_name, slices, names))
    return {"records": arrays_to_json(arrays)}


def _checked_options(
    buffer: Buffer, batch_size: int | None, options: Mapping[str, Any]
) -> dict[str, Any]:
    """The sampler's own parameters: each one this buffer's sampler does not take, and each
    one it needs and did not get, is refused naming it (never a silent default)."""
    given = {name: value for name, value in options.items() if value not in (None, [])}
    for name in given:
        if OPTION_OWNER.get(name) != buffer.sampler:
            raise RecordError(
                name,
                f"only for the {OPTION_OWNER.get(name, 'no')} sampler; "
                f"this buffer samples {buffer.sampler}",
            )
    if buffer.sampler == SamplerKind.FULL_BATCH and batch_size:
        raise RecordError("batch_size", "a full batch is every complete step: leave it out")
    needs_size = buffer.sampler not in (SamplerKind.FULL_BATCH, SamplerKind.FIFO_PER_ACTOR)
    if needs_size and not batch_size:
        raise RecordError("batch_size", f"required by the {buffer.sampler} sampler")
    if buffer.sampler == SamplerKind.N_STEP:
        for name in N_STEP_REQUIRED:
            if name not in given:
                raise RecordError(name, "required by the n_step sampler")
    return given


def records_sample(
    *,
    buffer: Buffer,
    batch_size: int | None,
    keys: Sequence[str],
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A batch drawn with the buffer's own sampler: full batch (every complete step, once),
    uniform, prioritised (with importance-sampling weights and the slots to re-prioritise),
    n-step (uniform steps with their n-step returns; ``options``: n, gamma, reward_key,
    done_key, last_keys) or FIFO per actor (the oldest waiting block of one actor's steps, in
    order, each once; ``options``: actor)."""
    given = _checked_options(buffer, batch_size, options or {})
    schema = schema_of(buffer)
    names = stored_keys(schema, keys)
    size = batch_size or 0
    if buffer.sampler == SamplerKind.N_STEP:
        return _n_step_sample(buffer, schema, size, names, given)
    if buffer.sampler == SamplerKind.FIFO_PER_ACTOR:
        actor, arrays = call(
            lambda client: client.sample_fifo(
                buffer.service_name, batch_size, given.get("actor"), names
            )
        )
        steps = arrays.pop("fifo.steps")
        slots = arrays.pop("slots")
        return {
            "slots": slots.tolist(),
            "records": arrays_to_json(arrays),
            "actor": actor,
            "steps": steps.tolist(),
        }
    arrays = call(lambda client: client.sample(buffer.service_name, buffer.sampler, size, names))
    slots = arrays.pop("slots")
    weights = arrays.pop("weights", None)
    answer: dict[str, Any] = {"slots": slots.tolist(), "records": arrays_to_json(arrays)}
    if weights is not None:
        answer["weights"] = weights.tolist()
    return answer


def _n_step_sample(
    buffer: Buffer, schema: Schema, size: int, names: list[str], given: Mapping[str, Any]
) -> dict[str, Any]:
    last_keys = stored_keys(schema, given.get("last_keys", ()), "last_keys")
    arrays = call(
        lambda client: client.sample_n_step(
            buffer.service_name,
            size,
            given["n"],
            given["gamma"],
            given["reward_key"],
            given["done_key"],
            names,
            last_keys,
        )
    )
    extra = {
        k[len(N_STEP_PREFIX) :]: arrays.pop(k) for k in list(arrays) if k.startswith(N_STEP_PREFIX)
    }
    last = {k[len("last.") :]: v for k, v in extra.items() if k.startswith("last.")}
    slots = arrays.pop("slots")
    return {
        "slots": slots.tolist(),
        "records": arrays_to_json(arrays),
        "n_step": {
            "returns": extra["returns"].tolist(),
            "discounts": extra["discounts"].tolist(),
            "steps": extra["steps"].tolist(),
            "last_slots": extra["last_slots"].tolist(),
            "last": arrays_to_json(last),
        },
    }


def priorities_update(
    *, buffer: Buffer, slots: Sequence[int], td_errors: Sequence[float]
) -> dict[str, int]:
    """PER: p_i = |δ_i| + ε for the slots a prioritised sample returned."""
    if not buffer.prioritised:
        raise BufferServiceRefused(
            status=409, field="sampler", reason=f"{buffer.name} is sampled {buffer.sampler}"
        )
    if len(slots) != len(td_errors):
        raise RecordError(
            "td_errors", f"expected one per slot ({len(slots)}), got {len(td_errors)}"
        )
    out_of_range = [slot for slot in slots if not 0 <= slot < buffer.capacity]
    if out_of_range:
        raise RecordError("slots", f"slot {out_of_range[0]} outside 0..{buffer.capacity - 1}")
    call(
        lambda client: client.update_priorities(
            buffer.service_name, np.asarray(slots), np.asarray(td_errors)
        )
    )
    return {"updated": len(slots)}


def buffer_stats(*, buffer: Buffer) -> dict[str, Any]:
    """Fill level, counters and trigger firings, as the buffer service counts them."""
    stats = call(lambda client: client.stats(buffer.service_name))
    held = int(stats.get("held", 0))
    return {**stats, "buffer": buffer.pk, "name": buffer.name, "fill": held / buffer.capacity}
