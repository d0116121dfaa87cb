"""The sync ``Client`` shared by threads (a trainer's thread pool): calls made while another is in
flight run on the client's loop thread and coalesce (``sdk/loom/coalesce.py``), against the real
processes — uvicorn serving the API, ``run_scheduler``, a CPU agent — over Redis and PostgreSQL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from loom import Action, ApiError, Client

from apps.actions.models import Action as ActionRow
from tests.apps.actions.cluster import Cluster
from tests.factories import JobFactory, make_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
THREADS = 24
CPU = {"cpu": 1}


def test_threads_sharing_a_client_coalesce_and_each_get_their_own_result(cluster: Cluster) -> None:
    cluster.start_scheduler()
    cluster.start_agent(f"{cluster.pool}-n1", "0,1")
    url = cluster.start_web()
    key = make_key(job=JobFactory.create())[1]
    start = threading.Barrier(THREADS)

    def trajectory(client: Client, index: int) -> Action:
        start.wait()
        if index % 2:
            return client.run(command=f"echo t-{index}", pool=cluster.pool, demand=CPU, timeout=60)
        action = client.submit(command=f"echo t-{index}", pool=cluster.pool, demand=CPU)
        return client.result(action.id, timeout=60)

    with Client(url, key) as client, ThreadPoolExecutor(THREADS) as threads:
        ended = list(threads.map(lambda i: trajectory(client, i), range(THREADS)))
        assert client._shared is not None  # the calls made alongside others ran on its loop
        # An error still reaches only its own caller, from the loop as from a lone request.
        bad = threads.submit(client.submit, command="true", pool="no-such-pool", demand=CPU)
        alongside = threads.submit(
            client.run, command="echo ok", pool=cluster.pool, demand=CPU, timeout=60
        )
        with pytest.raises(ApiError) as refused:
            bad.result()
        assert refused.value.status_code == 400 and alongside.result().output.strip() == "ok"
    assert [(a.status, a.output.strip()) for a in ended] == [
        ("succeeded", f"t-{i}") for i in range(THREADS)
    ], cluster.logs()
    rows = ActionRow.objects.filter(pk__in=[a.id for a in ended])
    # A batch is inserted at one instant: fewer instants than actions means shared submits
    # (one request each, every submitted_at would differ).
    instants = set(rows.values_list("submitted_at", flat=True))
    assert rows.count() == THREADS and len(instants) < THREADS / 2, len(instants)
