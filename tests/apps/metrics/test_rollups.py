from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.metrics.models import JobRollup, PoolRollup
from apps.metrics.selectors import job_history, pool_history
from apps.metrics.services import bucket_floor, rollup_prune, rollup_write
from apps.metrics.tasks import metrics_rollup
from tests.apps.dashboard.conftest import finished_action, running_action


def test_bucket_floor_aligns_to_the_bucket() -> None:
    now = timezone.now().replace(second=37, microsecond=500)
    assert bucket_floor(now, 10).second == 30
    assert bucket_floor(now, 10).microsecond == 0


def test_rollup_writes_pool_and_job_rows_with_act_and_utilisation(cpu_node: Any, job: Any) -> None:
    from tests.factories import ActionFactory

    pool = cpu_node.pool
    for act_s in (1.0, 2.0, 3.0):
        finished_action(job, pool, act_s=act_s)
    running_action(job, pool, cpu_node, cores=[0, 1])
    ActionFactory(job=job, pool=pool)
    result = rollup_write(bucket_s=10)
    assert (result.pools, result.jobs) == (1, 1)
    row = PoolRollup.objects.get(pool=pool)
    assert (row.waiting, row.running, row.completed) == (1, 1, 3)
    assert row.act_p50_s == pytest.approx(2.0, abs=0.01)
    assert row.act_mean_s == pytest.approx(2.0, abs=0.01)
    assert row.util_cpu == pytest.approx(0.5)
    assert JobRollup.objects.get(job=job).completed == 3


def test_rollup_is_idempotent_per_bucket_and_history_reads_it_back(cpu_pool: Any, job: Any) -> None:
    now = timezone.now()
    rollup_write(now=now, bucket_s=10)
    rollup_write(now=now, bucket_s=10)
    assert PoolRollup.objects.count() == 1
    history = pool_history(pools=[cpu_pool])["cpu"]
    assert len(history) == 1 and history[0]["waiting"] == 0
    assert history[0]["t"] == pytest.approx(bucket_floor(now, 10).timestamp() + 10)
    assert job_history(job=job) == []  # no activity → no job row


def test_beat_task_and_prune(cpu_pool: Any) -> None:
    assert metrics_rollup() == 1
    old = PoolRollup.objects.get()
    old.bucket_start -= timedelta(days=30)
    old.save()
    assert rollup_prune(older_than=timezone.now() - timedelta(days=14)) == 1
    assert not PoolRollup.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_embedded_rollup_thread_writes_buckets(cpu_pool: Any) -> None:
    import time

    from apps.embedded.rollups import RollupThread

    thread = RollupThread(bucket_s=1)
    thread.start()
    deadline = time.monotonic() + 5
    while thread.written < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    thread.stop()
    assert thread.written >= 1 and PoolRollup.objects.filter(pool=cpu_pool).exists()
