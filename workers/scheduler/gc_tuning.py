"""Garbage-collector settings for a process that runs nothing but a scheduler service.

The service holds thousands of long-lived objects (the ledger, the scheduler's queues, the
imported modules). With CPython's default thresholds (700, 10, 10) a full collection walks all
of them every few hundred passes and stalls one pass for milliseconds. After start-up the
process moves what it holds into the permanent generation (``gc.freeze``: never scanned again)
and collects young objects less often; ``bench scheduler_pass`` times passes under the same
settings and reports the defaults beside them.
"""

from __future__ import annotations

import gc

SERVICE_GC_THRESHOLDS = (20_000, 20, 1_000)


def freeze_after_start_up() -> None:
    """Collect once, freeze the survivors, and raise the thresholds (call once, when ready)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVICE_GC_THRESHOLDS)
