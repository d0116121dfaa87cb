"""Celery tasks of trajectories: the LLM router's links to the rows (``router_state``,
``router_registry``) and its length predictor's training (``length_predictor``), run by beat
(``CELERY_BEAT_SCHEDULE``)."""

from __future__ import annotations

from celery import shared_task

from apps.jobs.router_keys import router_keys_sync
from apps.trajectories.length_predictor import train_length_predictor
from apps.trajectories.router_control import router_policies_sync
from apps.trajectories.router_registry import router_trajectories_sync
from apps.trajectories.router_state import router_state_drain


@shared_task(name="trajectories.router_state", ignore_result=True)
def trajectories_router_state() -> int:
    """Persist what the router published since the last run; the trajectories updated."""
    return router_state_drain().applied


@shared_task(name="trajectories.router_sync", ignore_result=True)
def trajectories_router_sync() -> tuple[int, int, int]:
    """Rebuild the router's registries (job keys, live trajectories, the routers' policies) from
    the database: repairs a Redis write that failed, a restarted Redis, rows deleted since."""
    return router_keys_sync(), router_trajectories_sync(), router_policies_sync()


@shared_task(name="trajectories.train_length_predictor", ignore_result=True)
def trajectories_train_length_predictor() -> bool:
    """Train the router's length predictor on recorded trajectories; whether one was published."""
    return train_length_predictor().published
