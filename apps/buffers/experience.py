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

SERVICE_SAMPLERS = (SamplerKind.FULL_BATCH, SamplerKind.UNIFORM, SamplerKind.PRIORITISED)


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


def records_sample(
    *, buffer: Buffer, batch_size: int | None, keys: Sequence[str]
) -> dict[str, Any]:
    """A batch drawn with the buffer's own sampler: full batch (every complete step, once),
    uniform or prioritised (with importance-sampling weights and the slots to re-prioritise)."""
    if buffer.sampler not in SERVICE_SAMPLERS:
        raise BufferServiceRefused(
            status=409,
            field="sampler",
            reason=f"the buffer service samples {', '.join(SERVICE_SAMPLERS)}; "
            f"this buffer's {buffer.sampler} sampler reads its data through gather",
        )
    if buffer.sampler == SamplerKind.FULL_BATCH and batch_size:
        raise RecordError("batch_size", "a full batch is every complete step: leave it out")
    if buffer.sampler != SamplerKind.FULL_BATCH and not batch_size:
        raise RecordError("batch_size", f"required by the {buffer.sampler} sampler")
    names = stored_keys(schema_of(buffer), keys)
    size = batch_size or 0
    arrays = call(lambda client: client.sample(buffer.service_name, buffer.sampler, size, names))
    slots = arrays.pop("slots")
    weights = arrays.pop("weights", None)
    answer: dict[str, Any] = {"slots": slots.tolist(), "records": arrays_to_json(arrays)}
    if weights is not None:
        answer["weights"] = weights.tolist()
    return answer


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
