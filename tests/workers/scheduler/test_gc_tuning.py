"""The scheduler process's collector settings: frozen survivors, raised thresholds."""

from __future__ import annotations

import gc

from workers.scheduler.gc_tuning import SERVICE_GC_THRESHOLDS, freeze_after_start_up


def test_freeze_after_start_up_freezes_and_raises_the_thresholds() -> None:
    saved = gc.get_threshold()
    try:
        freeze_after_start_up()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == SERVICE_GC_THRESHOLDS
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
