"""The scheduler service's settings (one service per pool; ``run_scheduler`` and the embedded
runtime build them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServiceConfig:
    pool: str
    instance: str = "main"
    max_attempts: int = 3
    heartbeat_timeout_s: float = 15.0
    result_grace_s: float = 30.0
    housekeeping_interval_s: float = 0.5
    policy_refresh_s: float = 1.0
    # How often housekeeping looks in the store for queued actions whose announcement never came
    # (the web died between its commit and its publish), and how old such an action must be: an
    # announcement still on its way is not overtaken.
    orphan_sweep_s: float = 10.0
    orphan_min_age_s: float = 5.0
    read_count: int = 1024
    block_ms: int = 100
    # Store calls on the event loop's own thread instead of a thread of their own
    # (workers/threads.py ``InlineCalls``): for a process that runs nothing but this service,
    # whose store may be called from its loop (``run_scheduler`` allows Django to be).
    store_inline: bool = False
    # After the start-up rebuild, freeze what the process holds and raise the collector's
    # thresholds (workers/scheduler/gc_tuning.py): for a process that runs only this service.
    freeze_gc_after_start_up: bool = False
