from typing import Any

import pytest
from django.test import override_settings

from tests.apps.dashboard.conftest import finished_action


def _sample(text: str, prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{prefix} not in /metrics")


def test_metrics_exposes_queue_act_utilisation_and_requests(
    client: Any, cpu_node: Any, job: Any
) -> None:
    from apps.metrics.services import rollup_write
    from tests.factories import ActionFactory

    pool = cpu_node.pool
    ActionFactory.create_batch(4, job=job, pool=pool)
    finished_action(job, pool, act_s=2.0)
    rollup_write(bucket_s=10)
    client.get("/healthz")
    text = client.get("/metrics").content.decode()
    assert _sample(text, 'loom_pool_waiting_actions{pool="cpu"}') == 4
    assert _sample(text, 'loom_pool_running_actions{pool="cpu"}') == 0
    assert _sample(text, 'loom_pool_utilisation_ratio{pool="cpu",resource="cpu"}') == 0
    assert _sample(
        text, 'loom_action_completion_seconds{pool="cpu",quantile="0.5"}'
    ) == pytest.approx(2.0, abs=0.01)
    assert _sample(text, 'loom_action_completion_seconds_count{pool="cpu"}') == 1
    assert _sample(text, 'loom_pool_oldest_waiting_seconds{pool="cpu"}') >= 0
    assert _sample(text, 'loom_http_requests_total{method="GET",route="healthz",status="200"}') >= 1
    assert "loom_http_request_duration_seconds_bucket" in text


@override_settings(LOOM_METRICS_TOKEN="s3cret")
def test_metrics_token_when_configured(client: Any, db: Any) -> None:
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
