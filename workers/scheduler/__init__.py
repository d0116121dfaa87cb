"""The scheduler service: one asyncio process per resource pool (DESIGN.md "Processes").

``SchedulerService`` keeps the pool's waiting queue, running set and topology in memory, runs the
shared ARL-Tangram scheduler (``workers.algorithms.tangram``) on every arrival and completion,
dispatches assignments to node agents over the transport and persists state through an
``ActionStore`` (the Django implementation is ``apps.actions.scheduler_store``), in one batch per
pass. It never imports Django itself, so it can be tested and embedded anywhere.
"""

from workers.scheduler.config import ServiceConfig
from workers.scheduler.records import (
    ActionRecord,
    Applied,
    FinishUpdate,
    RequeueUpdate,
    ScheduledUpdate,
)
from workers.scheduler.service import SchedulerService
from workers.scheduler.store import ActionStore

__all__ = [
    "ActionRecord",
    "ActionStore",
    "Applied",
    "FinishUpdate",
    "RequeueUpdate",
    "ScheduledUpdate",
    "SchedulerService",
    "ServiceConfig",
]
