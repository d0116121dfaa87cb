"""The Celery baseline of ``bench/overhead.py``: a trivial task on the same Redis (broker and
result backend), run by a real ``celery worker --pool solo`` subprocess."""

from __future__ import annotations

import os

from celery import Celery

app = Celery(
    "loom_overhead_baseline",
    broker=os.environ.get("LOOM_BENCH_CELERY_URL", "redis://127.0.0.1:6379/14"),
    backend=os.environ.get("LOOM_BENCH_CELERY_URL", "redis://127.0.0.1:6379/14"),
)
app.conf.update(
    task_default_queue=os.environ.get("LOOM_BENCH_CELERY_QUEUE", "loom-overhead"),
    worker_prefetch_multiplier=1,
    result_expires=600,
    broker_connection_retry_on_startup=True,
)


@app.task(name="loom_overhead.noop")
def noop() -> None:
    """Does nothing: the round trip is pure broker + worker + result-backend overhead."""
