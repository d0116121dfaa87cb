"""Migration 0006: services stored before the registry's rules get chunk sizes that pass them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("resources", "0005_service_vocab_size")]
AFTER = [("resources", "0006_service_chunk_sizes_cleaned")]


def test_stored_chunk_sizes_are_kept_to_1_2_4_8():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        old = executor.loader.project_state(BEFORE).apps.get_model("resources", "Service")
        for name, sizes in (("a", [3, 2, 16]), ("b", []), ("c", [8, 1]), ("d", [5])):
            old.objects.create(name=name, backend="torch", model="m", allowed_dop=sizes)
        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        new = executor.loader.project_state(AFTER).apps.get_model("resources", "Service")
        stored = dict(new.objects.values_list("name", "allowed_dop"))
        assert stored == {"a": [2], "b": [1], "c": [1, 8], "d": [1]}
    finally:  # the schema every other test expects
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
