"""Loom's own vacuum/analyze where the server's autovacuum is off (controlplane/db_maintenance)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from controlplane.db_maintenance import (
    ADVISORY_LOCK_KEY,
    DatabaseMaintainer,
    TableActivity,
    Thresholds,
    maintain_once,
    server_autovacuum_on,
    vacuum_and_analyze_due,
    work_due,
)
from tests.factories import ActionFactory


def test_rule_is_autovacuums_base_plus_scale_of_live_rows() -> None:
    rule = Thresholds(vacuum_base=50, vacuum_scale=0.2, analyze_base=50, analyze_scale=0.1)
    tables = [
        TableActivity("quiet", live_rows=1000, dead_rows=250, modified_since_analyze=150),
        TableActivity("dead", live_rows=1000, dead_rows=251, modified_since_analyze=0),
        TableActivity("stale", live_rows=1000, dead_rows=0, modified_since_analyze=151),
        TableActivity("both", live_rows=0, dead_rows=51, modified_since_analyze=51),
        TableActivity("never_counted", live_rows=-1, dead_rows=0, modified_since_analyze=0),
    ]
    assert work_due(tables, rule) == [("dead", "vacuum"), ("stale", "analyze"), ("both", "vacuum")]


@pytest.mark.django_db(transaction=True)
def test_due_work_runs_and_clears_the_counters() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("VACUUM and pg_stat_user_tables are PostgreSQL's")
    actions = ActionFactory.create_batch(60)
    for action in actions:
        action.output = "changed"
        action.save(update_fields=["output"])
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    done = vacuum_and_analyze_due(Thresholds(vacuum_base=10, vacuum_scale=0.0))
    assert ("actions_action", "vacuum") in done
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT last_vacuum IS NOT NULL, last_analyze IS NOT NULL FROM pg_stat_user_tables "
            "WHERE relname = 'actions_action'"
        )
        assert cursor.fetchone() == (True, True)


@pytest.mark.django_db(transaction=True)
def test_a_pass_defers_to_the_servers_autovacuum_and_to_a_concurrent_pass() -> None:
    if connection.vendor != "postgresql":
        assert maintain_once() == []
        return
    if server_autovacuum_on():
        assert maintain_once() == []
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
    try:
        seen: list[object] = []

        def other_process() -> None:
            seen.append(vacuum_and_analyze_due(Thresholds(vacuum_base=0, vacuum_scale=0.0)))
            connection.close()

        thread = threading.Thread(target=other_process)
        thread.start()
        thread.join()
        assert seen == [[]]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_LOCK_KEY])


def test_maintainer_thread_stops_promptly() -> None:
    maintainer = DatabaseMaintainer(period_s=60).start()
    maintainer.stop(timeout_s=2)
    assert not maintainer._thread.is_alive()
