from __future__ import annotations

from django.conf import settings

from controlplane import celery_app


def test_celery_is_eager_in_the_embedded_mode():
    assert settings.LOOM_EMBEDDED
    assert celery_app.conf.task_always_eager is True
    assert celery_app.conf.broker_url == "memory://"

    @celery_app.task(name="tests.add")
    def add(a: int, b: int) -> int:
        return a + b

    assert add.delay(2, 3).get(timeout=1) == 5


def test_every_scheduled_task_exists():
    """A beat entry naming no registered task would be sent to no one, silently."""
    celery_app.loader.import_default_modules()  # the apps' tasks.py, as a worker loads them
    scheduled = {str(entry["task"]) for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    missing = sorted(scheduled - set(celery_app.tasks))
    assert not missing, missing
    assert {"trajectories.router_state", "buffers.snapshot", "metrics.rollup"} <= scheduled
