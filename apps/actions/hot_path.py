"""Statements for the single-action hot path (submit, then read back how it ended).

How it ended is a row of ``PROGRESS_FIELDS`` (``progress_from_row``): read back by the waiter
(``refresh_progress``), or returned by the scheduler's finishing UPDATE (``progress_returning``)
and published with the end (``apps.actions.notify``), so the waiter need not read it at all.

The ORM spends ~0.8 ms of Python per statement here, several times what PostgreSQL takes to
answer (measured in ``bench overhead``: the re-read after a submit-and-wait was 2.2 ms of a
14 ms round trip). These helpers issue the same statements the ORM would, built once per process
from the model's own metadata — column names, value preparation (``pre_save`` and
``get_db_prep_save``) and result converters are Django's — so a new column on ``Action`` needs
no change here.

A submitter that will answer only after a later synchronous commit of the same action (submit
and wait: the end's commit) may insert without waiting for the WAL flush (``durable=False``):
PostgreSQL flushes the WAL in order, so the later commit's flush — or ``flush_commits`` — makes
the insert durable too, before anyone is told of it.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db import connection
from django.db.models import Field

from apps.actions.models import Action
from apps.resources.models import Node

# What changes on an action after it is submitted (scheduler, agent, reward pipeline).
PROGRESS_FIELDS = (
    "status",
    "allocation",
    "attempts",
    "scheduled_at",
    "started_at",
    "finished_at",
    "exit_code",
    "output",
    "score",
    "error_reason",
    "service_timings",
    "cache_events",
)

Converter = Callable[[Any, Any, Any], Any]
Converters = list[tuple[Any, list[Converter]]]  # per field: its column expression, converters


def insert_action(action: Action, *, durable: bool = True) -> None:
    """INSERT ``action`` in one statement and give it its primary key (PostgreSQL: RETURNING).

    Like ``action.save(force_insert=True)`` minus the ORM's per-call compilation; sends no
    ``pre_save``/``post_save`` signals (``Action`` has no receivers). Raises IntegrityError as
    ``save`` would.

    ``durable=False`` (PostgreSQL in autocommit, client-side binding): the insert commits
    without waiting for its WAL flush (``synchronous_commit = off`` for this transaction only).
    It is visible at once but survives a database crash only once a later synchronous commit
    (the scheduler's, which precedes any dispatch) or ``flush_commits`` has returned: the caller
    must see one of them before it tells anyone the action exists.
    """
    fields, sql = _insert_statement(connection.vendor)
    values = [field.get_db_prep_save(field.pre_save(action, True), connection) for field in fields]
    lazy = not durable and _can_commit_lazily()
    with connection.cursor() as cursor:
        if lazy:
            # One simple-protocol message: PostgreSQL runs both as one implicit transaction,
            # so SET LOCAL holds for this INSERT's commit only.
            cursor.execute(f"SET LOCAL synchronous_commit TO OFF; {sql}", values)
            cursor.nextset()
        else:
            cursor.execute(sql, values)
        row = cursor.fetchone()
    assert row is not None
    action.pk = row[0]
    action._state.adding = False
    action._state.db = connection.alias


def flush_commits() -> None:
    """Return once every commit this connection's server acknowledged so far is on disk: a
    transaction that takes an id commits synchronously, and its WAL flush covers all that
    precedes it (``insert_action(durable=False)``'s inserts among them)."""
    if not _can_commit_lazily():
        return  # nothing was committed lazily
    with connection.cursor() as cursor:
        cursor.execute("SELECT txid_current()")


def _can_commit_lazily() -> bool:
    """PostgreSQL in autocommit with client-side binding (Django's default), which sends a
    statement's text whole and so may send two statements in one message."""
    return (
        connection.vendor == "postgresql"
        and not connection.in_atomic_block
        and connection.settings_dict["OPTIONS"].get("server_side_binding") is not True
    )


def refresh_progress(action: Action) -> None:
    """Re-read what changes after submission (``PROGRESS_FIELDS`` and the node, by name) into
    ``action``, in one statement. Raises ``Action.DoesNotExist`` if the row is gone."""
    sql = _progress_select(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, [action.pk])
        row = cursor.fetchone()
    if row is None:
        raise Action.DoesNotExist(f"action {action.pk} does not exist")
    apply_progress(action, progress_from_row(row))


@functools.cache
def progress_returning(vendor: str) -> str:
    """The ``RETURNING`` list of an ``UPDATE {actions} AS a``: the row's id, then the columns
    ``progress_from_row`` reads (PostgreSQL; the node's name by a subquery)."""
    quote = connection.ops.quote_name
    return f"a.{quote(Action._meta.pk.column)}, {_progress_columns(vendor, True)}"


def progress_from_row(row: Sequence[Any]) -> dict[str, Any]:
    """What a row of ``PROGRESS_FIELDS``, node id and node name says, JSON-safe (datetimes as
    ISO 8601, all digits kept): published with an action's end, so a waiter need not read it."""
    fields, converters = _progress_fields(connection.vendor)
    progress: dict[str, Any] = {}
    for field, (column, field_converters), value in zip(fields, converters, row, strict=False):
        for convert in field_converters:
            value = convert(value, column, connection)
        progress[field.attname] = value.isoformat() if isinstance(value, dt.datetime) else value
    progress["node_id"], progress["node_name"] = row[len(fields)], row[len(fields) + 1]
    return progress


def apply_progress(action: Action, progress: Mapping[str, Any]) -> None:
    """Set what ``progress_from_row`` read on ``action``, as ``refresh_progress`` would."""
    fields, _ = _progress_fields(connection.vendor)
    for field in fields:
        setattr(action, field.attname, field.to_python(progress[field.attname]))
    node_id = progress["node_id"]
    if node_id is None:
        action.node = None
    else:
        # A partial instance, as ``.only("id", "name")`` gives: other fields load on access.
        name = progress["node_name"]
        action.node = Node.from_db(connection.alias, ["id", "name"], [node_id, name])


# Built once per process; keyed by the backend's vendor (the quoting and converters depend on it).
@functools.cache
def _insert_statement(vendor: str) -> tuple[list[Field[Any, Any]], str]:
    meta = Action._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({placeholders}) "
        f"RETURNING {quote(meta.pk.column)}"
    )
    return fields, sql


@functools.cache
def _progress_fields(vendor: str) -> tuple[list[Field[Any, Any]], Converters]:
    meta = Action._meta
    fields: list[Field[Any, Any]] = [meta.get_field(name) for name in PROGRESS_FIELDS]  # type: ignore[misc]
    converters: Converters = []
    for field in fields:
        # The compiler's own converters: the backend's (SQLite datetimes) then the field's (JSON).
        column = field.get_col(meta.db_table)
        backend: list[Converter] = connection.ops.get_db_converters(column)
        converters.append((column, backend + column.get_db_converters(connection)))
    return fields, converters


@functools.cache
def _progress_columns(vendor: str, node_by_subquery: bool) -> str:
    """``PROGRESS_FIELDS`` of the action ``a``, its node's id and name (joined as ``n``, or by a
    subquery where no join is possible: a ``RETURNING`` list)."""
    meta, node_meta = Action._meta, Node._meta
    quote = connection.ops.quote_name
    node_fk = quote(meta.get_field("node").column)
    node_pk, node_name = quote(node_meta.pk.column), quote(node_meta.get_field("name").column)
    fields, _ = _progress_fields(vendor)
    columns = ", ".join(f"a.{quote(field.column)}" for field in fields)
    if node_by_subquery:
        nodes = quote(node_meta.db_table)
        name = f"(SELECT {node_name} FROM {nodes} WHERE {node_pk} = a.{node_fk})"
    else:
        name = f"n.{node_name}"
    return f"{columns}, a.{node_fk}, {name}"


@functools.cache
def _progress_select(vendor: str) -> str:
    meta, node_meta = Action._meta, Node._meta
    quote = connection.ops.quote_name
    join = f"n.{quote(node_meta.pk.column)} = a.{quote(meta.get_field('node').column)}"
    return (
        f"SELECT {_progress_columns(vendor, False)} FROM {quote(meta.db_table)} a "
        f"LEFT JOIN {quote(node_meta.db_table)} n ON {join} "
        f"WHERE a.{quote(meta.pk.column)} = %s"
    )
