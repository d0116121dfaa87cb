"""Shared fixtures for the Django side (API clients for a job key, another job's key, staff), the
``processes`` marker the suite gives itself, and one test database per concurrent run."""

from __future__ import annotations

import fcntl
import os
import platform
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import pytest

# The official openai client (router and engine tests) reads the processor name for its headers,
# which runs ``uname -p`` once per process: read it at collection, so that no test that is not
# marked ``processes`` starts one.
platform.uname().processor  # noqa: B018


@dataclass
class Actor:
    """A client that authenticates one way, and what it acts for."""

    client: Any
    job: Any = None
    raw_key: str = ""
    user: Any = None


def _bearer_client(raw_key: str) -> Any:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client


@pytest.fixture
def anon_client() -> Any:
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def job_actor(db: Any) -> Actor:
    from tests.factories import JobFactory, make_key

    job = JobFactory.create(name="trainer")
    _, raw_key = make_key(job=job)
    return Actor(client=_bearer_client(raw_key), job=job, raw_key=raw_key, user=job.owner)


@pytest.fixture
def other_actor(db: Any) -> Actor:
    from tests.factories import JobFactory, make_key

    job = JobFactory.create(name="other")
    _, raw_key = make_key(job=job)
    return Actor(client=_bearer_client(raw_key), job=job, raw_key=raw_key, user=job.owner)


@pytest.fixture
def staff_actor(db: Any) -> Actor:
    from tests.factories import StaffFactory, make_key

    user = StaffFactory.create(username="operator")
    _, raw_key = make_key(user=user)
    return Actor(client=_bearer_client(raw_key), raw_key=raw_key, user=user)


@pytest.fixture
def staff_session(db: Any) -> Actor:
    from rest_framework.test import APIClient

    from tests.factories import StaffFactory

    user = StaffFactory.create(username="browser-admin")
    client = APIClient()
    client.force_login(user)
    return Actor(client=client, user=user)


_DATABASE_SLOTS = 16
_held_database_slot: list[IO[str]] = []


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Concurrent pytest runs on one machine (an edit loop beside a full run) each get a test
    database of their own: the first slot whose lock file no other live run holds. Slot 0 keeps
    the plain name, so a lone run reuses the database ``--reuse-db`` kept. Under xdist each worker
    already has its suffix (``_gw0``…) and takes slots of that worker's own, so a lone parallel
    run reuses its workers' databases too."""
    from pytest_django.fixtures import _set_suffix_to_test_databases

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    for slot in range(_DATABASE_SLOTS):
        path = f"{tempfile.gettempdir()}/loom-test-database-{worker}-{slot}.lock"
        lock = open(path, "w")  # noqa: SIM115
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        _held_database_slot.append(lock)  # held until this process exits
        if slot:
            _set_suffix_to_test_databases(suffix=f"slot{slot}")
        return
    pytest.exit(f"all {_DATABASE_SLOTS} test database slots are held by other pytest runs")


@pytest.fixture(autouse=True)
def _fresh_submit_catalog() -> None:
    """Each test's database is rolled back or flushed beneath the app, without the model signals
    that bump the catalog generation: start every test with a cached catalog nobody trusts."""
    from apps.resources.generation import bump

    bump()


@pytest.fixture(autouse=True)
def _fresh_key_cache() -> None:
    """Likewise for verified API keys (``apps.jobs.key_cache``): rolled-back keys, jobs and users
    send no signal, so no test inherits the rows an earlier one cached."""
    from apps.jobs import key_cache

    key_cache.clear()


@pytest.fixture
def redis_url() -> str:
    """``LOOM_TEST_REDIS_URL``; skips the test, saying why, when that Redis is unreachable."""
    import redis
    from django.conf import settings

    url: str = settings.LOOM_TEST_REDIS_URL
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {url} is not reachable: {exc}")
    return url


@pytest.fixture
def router_names(settings: Any, redis_url: str) -> Iterator[Any]:
    """The control plane in Redis mode on a key prefix of its own, and the LLM router's Redis
    names under it (``workers.router.registry.RegistryNames``); the prefix's keys go after."""
    import uuid

    import redis

    from workers.router.registry import RegistryNames

    prefix = f"looptest-{uuid.uuid4().hex[:12]}"
    settings.REDIS_URL = redis_url
    settings.LOOM_STREAM_PREFIX = prefix
    yield RegistryNames(prefix)
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


# --- Tests that start real processes ----------------------------------------------------------

# Directories where every test starts real processes or runs a benchmark: agents and their
# sandboxes (a local backend built in the test's body), the benchmarks' cores, the deploy
# scripts. Elsewhere, a fixture that starts processes requests ``starts_processes``, and a test
# that starts one in its own body carries the mark itself.
PROCESS_DIRECTORIES = ("tests/workers/agents/", "tests/bench/", "tests/deploy/")
# Tests marked so start processes too (dockerd, Chromium).
PROCESS_MARKERS = ("docker", "e2e")
SPAWN_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.system"}
)
# A library's one-off probe, not a process a test starts: loky (under scikit-learn) counts the
# physical cores with ``lscpu`` once per process.
PROBES = frozenset({"lscpu"})
_spawned: list[str] = []


@pytest.fixture(scope="session")
def starts_processes() -> None:
    """Requested by each fixture that starts real processes (sandboxed actions, subprocesses,
    dockerd, Chromium): the tests using it are marked ``processes``."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``processes`` by fixture, directory or marker, before ``-m`` deselects. These tests share
    the cores their actions are pinned to, the sandbox user's process limit (a fork-bomb test
    fills it), dockerd and Chromium: ``make test`` runs them one at a time, the others beside."""
    for item in items:
        if (
            "starts_processes" in getattr(item, "fixturenames", ())
            or item.nodeid.startswith(PROCESS_DIRECTORIES)
            or any(item.get_closest_marker(name) for name in PROCESS_MARKERS)
        ):
            item.add_marker(pytest.mark.processes)


def _record_spawn(event: str, args: tuple[Any, ...]) -> None:
    if event in SPAWN_EVENTS and not (event == "subprocess.Popen" and str(args[0]) in PROBES):
        _spawned.append(f"{event} {str(args)[:200]}")


def pytest_collection_finish(session: pytest.Session) -> None:
    """A run none of whose tests is marked to start processes (``make test-fast``, one pure
    package) holds them to it: a test that starts one anyway fails, saying what it started."""
    if not any(item.get_closest_marker("processes") for item in session.items):
        sys.addaudithook(_record_spawn)


@pytest.fixture(autouse=True)
def _starts_no_unmarked_process() -> Iterator[None]:
    _spawned.clear()
    yield
    if _spawned:
        started = list(_spawned)
        _spawned.clear()
        pytest.fail(
            f"started a process without the `processes` mark: {started}; mark the test, or have "
            "the fixture that starts it request `starts_processes` (tests/conftest.py)",
            pytrace=False,
        )
