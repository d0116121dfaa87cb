"""The scheduler service's settings (one service per pool; ``run_scheduler`` and the embedded
runtime build them)."""

from __future__ import annotations

from dataclasses import dataclass

from workers.algorithms.tangram.scheduler import DEFAULT_CANDIDATE_CAP, pass_settings_check


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
    # How a pass's Alg. 2 estimate places the remaining actions: "efficient" (Loom's own, at the
    # allocation the holding price would give them) or "minimum" (arl-tangram App. A, their
    # minimum units); and how many candidates one pass admits (None: the whole FCFS prefix that
    # fits, as in Alg. 1). The pool's scheduler is built with them at every (re)start.
    rest_model: str = "efficient"
    candidate_cap: int | None = DEFAULT_CANDIDATE_CAP

    def __post_init__(self) -> None:
        # a bad value fails here, naming the setting, not at the pool's first start-up
        pass_settings_check(rest_model=self.rest_model, candidate_cap=self.candidate_cap)
