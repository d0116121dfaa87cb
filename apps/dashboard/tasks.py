"""Celery tasks of the dashboard: take ids, call a service (STYLE.md item 3)."""

from __future__ import annotations

from celery import shared_task

from apps.dashboard.simulation import simulation_execute


@shared_task(name="dashboard.simulate", ignore_result=True)
def dashboard_simulate(run_id: int) -> None:
    """Replay a SimulationRun's trace under each of its policies."""
    simulation_execute(run_id=run_id)
