"""The database-backed part of ``/metrics``: queues, ACT and utilisation per pool.

Computed at scrape time from the same bounded selectors the dashboard uses, so a Prometheus
server sees exactly what an operator sees. ``loom_action_completion_seconds`` is a summary: its
quantiles cover the last minute of completions (like a client-side sliding-window summary) and its
``_count``/``_sum`` add up the rollups, which survive restarts.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import F, FloatField, Sum
from django.db.models.functions import Coalesce
from prometheus_client.core import GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from apps.metrics.measures import pool_snapshot
from apps.metrics.models import PoolRollup
from apps.resources.models import ResourcePool


class PoolMetricsCollector(Collector):
    """Per-pool gauges and the ACT summary, read from the database on each scrape."""

    def collect(self) -> Iterator[Metric]:
        waiting = GaugeMetricFamily(
            "loom_pool_waiting_actions", "Actions queued in the pool", labels=["pool"]
        )
        running = GaugeMetricFamily(
            "loom_pool_running_actions", "Actions scheduled or running", labels=["pool"]
        )
        oldest = GaugeMetricFamily(
            "loom_pool_oldest_waiting_seconds", "Age of the oldest queued action", labels=["pool"]
        )
        utilisation = GaugeMetricFamily(
            "loom_pool_utilisation_ratio",
            "Share of the pool's cores / GPUs / API quota held by actions",
            labels=["pool", "resource"],
        )
        act = SummaryMetricFamily(
            "loom_action_completion_seconds",
            "Action completion time (finished - submitted)",
            labels=["pool"],
        )
        totals = {
            row["pool__name"]: row
            for row in PoolRollup.objects.values("pool__name").annotate(
                count=Coalesce(Sum("completed"), 0),
                total=Coalesce(
                    Sum(F("completed") * F("act_mean_s"), output_field=FloatField()), 0.0
                ),
            )
        }
        for pool in ResourcePool.objects.all():
            snapshot = pool_snapshot(pool)
            name = pool.name
            waiting.add_metric([name], snapshot["waiting"])
            running.add_metric([name], snapshot["running"])
            oldest.add_metric([name], snapshot["oldest_wait_s"] or 0.0)
            for resource, value in snapshot["util"].items():
                if value is not None:
                    utilisation.add_metric([name, resource], value)
            stats = snapshot["act"]
            quantiles = [
                (q, v) for q, v in (("0.5", stats["p50"]), ("0.99", stats["p99"])) if v is not None
            ]
            total = totals.get(name, {"count": 0, "total": 0.0})
            act.add_metric(
                [name],
                count_value=int(total["count"]),
                sum_value=float(total["total"]),
            )
            for quantile, value in quantiles:
                act.add_sample(
                    "loom_action_completion_seconds", {"pool": name, "quantile": quantile}, value
                )
        yield from (waiting, running, oldest, utilisation, act)
