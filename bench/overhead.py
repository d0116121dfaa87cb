"""Control-plane overhead per action: submit → result, minus execution, for no-op actions.

Measured: p50 and p99, single and batched (SDK), at 1, 100 and 1 000 in
flight, over Redis; baseline: this machine's Celery ``.delay().get()`` round trip on the same
Redis, measured in the same run. Targets: batched per-action overhead p50 ≤ the Celery round trip
p50; a single action through the REST API p50 ≤ 2× the Celery round trip p50 (a ratio, not an
absolute bound: this machine's speed varies too much; the absolute p50 stays in the series as
information); ≥ 2 000 no-op actions/s through one scheduler and one agent.

Processes (all real, all on this machine's loopback): the web app under uvicorn with
``REDIS_URL`` set (production mode: submissions announced on the pool's Redis stream, results
woken through Redis pub/sub), ``manage.py run_scheduler --pool cpu``, one ``python -m
workers.agents.cpu`` agent, PostgreSQL (a throwaway database) and, for the baseline, a ``celery
worker --pool solo`` with a task that does nothing.

A no-op action is a CPU action without a command (``workers.scheduler.specs.dispatch_kind``): the
scheduler schedules and records it like any other and the agent answers it inline without a
process, so what is measured is exactly the control plane. Its demand is ``{"memory_mb": 1}`` —
it reserves no core, so 1 000 of them can be in flight on this 2-core machine.

Modes:

- Single actions through the REST API, one client, one at a time (the target's "single action
  through the REST API" is ``rest_run@1``, over ``celery``). Overhead of an action = client-observed
  submit → result minus its execution (finished − started, taken on the agent). Four forms,
  measured in interleaved rounds: ``rest_run@1`` — ``POST /actions/?wait=30``, submit and result
  in one request, on a plain keep-alive HTTP/1.1 connection (the standard library's client: the
  control plane's cost, not a client library's); ``rest_two@1`` — ``POST /actions/`` then
  ``GET /actions/{id}/result/?wait=30`` on that connection; ``sdk_run@1`` — ``AsyncClient.run``
  (the one-request form through the SDK, httpx); ``single@1`` — the SDK's ``submit()`` then
  ``result()``, with ``single@1_legs`` saying where its time went.
- ``single@c_uncoalesced`` / ``single@c_coalesced``: ``c`` concurrent trajectories sharing one
  ``AsyncClient``, each ``submit()`` then ``result()``: one request per call (the baseline) vs the
  SDK's default, concurrent calls coalesced into batched requests (``sdk/loom/coalesce.py``).
  Each also reports its requests per action and its actions/s.
- ``batch@k``: ``submit_batch()`` of ``k`` actions, then ``as_completed()`` (one long-poll for all).
  Per-action overhead of a batch = (batch wall time − execution) / k, i.e. the amortised cost; the
  latency of each action in the batch (submit start → its result) is reported too. The 100 and
  1 000 in flight of the targets are measured here.

Single submissions at 100 and 1 000 in flight, uncoalesced: each waiting long-poll holds one of
the web tier's ``LOOM_WEB_THREADS`` (64) request threads (not a database connection) until its
action ends, and every call is a whole web request; beyond that requests queue for a thread, so
these measure queueing more than overhead. Coalesced, the same calls become a few batched
submits and shared ``await`` long-polls — what the ``batch`` modes measure, reached without the
caller batching anything itself.
- ``throughput``: ``N`` actions inserted through the actions service, then announced to the
  scheduler in chunks of 1 000 as the API does; time until all are terminal in PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench._execution import (
    Children,
    Unavailable,
    cpu_agent_argv,
    django_env,
    free_port,
    listening,
    percentile,
    redis_prefix,
    redis_url,
    run_child,
    scheduler_argv,
    throwaway_database,
    wait_for,
)
from bench.report import BenchReport, Target, plot_path

POOL = "cpu"
NODE = "overhead-node"
NOOP = {"demand": {"memory_mb": 1}, "pool": POOL}
SINGLE_OVER_CELERY = 2.0
THROUGHPUT_TARGET = 2000.0


# --- children (Django) ----------------------------------------------------------------------------


def seed() -> dict[str, Any]:
    """(Django child) Migrate; one CPU pool, one job and its API key."""
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from apps.jobs.models import Job
    from apps.jobs.services import api_key_create
    from apps.resources.models import PoolKind, ResourcePool

    call_command("migrate", verbosity=0, interactive=False)
    ResourcePool.objects.create(name=POOL, kind=PoolKind.CPU)
    job = Job.objects.create(name="overhead", owner=User.objects.create_user("bench"))
    _, raw_key = api_key_create(job=job, name="bench")
    return {"key": raw_key, "job": job.pk}


def throughput(job_id: int, count: int, redis: str, prefix: str) -> dict[str, float]:
    """(Django child, REDIS_URL unset) Insert ``count`` no-ops, announce them, time them to end."""
    import redis as redis_lib

    from apps.actions.models import ACTIVE_STATUSES, Action
    from apps.actions.services import ActionSpec, action_submit_batch
    from apps.core.demand import parse_demand
    from apps.jobs.models import Job
    from apps.resources.models import ResourcePool
    from workers.transport import ActionsSubmitted, StreamNames
    from workers.transport.messages import encode_json

    job = Job.objects.get(pk=job_id)
    pool = ResourcePool.objects.get(name=POOL)
    spec = ActionSpec(demand=parse_demand(NOOP["demand"]), pool_id=pool.pk)
    ids: list[int] = []
    for start in range(0, count, 1000):
        batch = action_submit_batch(job=job, specs=[spec] * min(1000, count - start))
        ids.extend(s.action.pk for s in batch)
    client = redis_lib.Redis.from_url(redis)
    stream = StreamNames(prefix=prefix).events(POOL)
    started = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for start in range(0, count, 1000):
        message = ActionsSubmitted(action_ids=tuple(ids[start : start + 1000]))
        pipe.xadd(stream, {"m": encode_json(message)})
    pipe.execute()
    # Polled 50 times a second, so it must cost the machine nothing next to what it measures:
    # the job's still-active actions through its (job, status) index, not a 20 000-id IN list.
    remaining = Action.objects.filter(job=job, status__in=ACTIVE_STATUSES, pk__gte=ids[0])
    while remaining.exists():
        time.sleep(0.02)
        if time.perf_counter() - started > 300:
            raise TimeoutError("throughput run did not finish in 300 s")
    elapsed = time.perf_counter() - started
    ok = Action.objects.filter(pk__in=ids, status="succeeded").count()
    return {"count": float(count), "elapsed_s": elapsed, "succeeded": float(ok)}


# --- the Celery baseline ---------------------------------------------------------------


def celery_round_trips(children: Children, count: int) -> list[float]:
    queue = f"loom-overhead-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ)
    env.update(LOOM_BENCH_CELERY_URL=redis_url(), LOOM_BENCH_CELERY_QUEUE=queue)
    os.environ.update(LOOM_BENCH_CELERY_URL=redis_url(), LOOM_BENCH_CELERY_QUEUE=queue)
    celery = Path(sys.executable).with_name("celery")
    children.spawn(
        "celery",
        [
            str(celery), "-A", "bench._celery_baseline", "worker", "--pool", "solo",
            "--concurrency", "1", "-Q", queue, "--without-gossip", "--without-mingle",
            "--without-heartbeat", "--loglevel", "WARNING",
        ],
        env,
    )  # fmt: skip
    import importlib

    import bench._celery_baseline as baseline

    baseline = importlib.reload(baseline)  # pick up this run's broker URL and queue
    try:
        baseline.noop.delay().get(timeout=60)  # the worker is up
        for _ in range(20):
            baseline.noop.delay().get(timeout=10)
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            baseline.noop.delay().get(timeout=10)
            samples.append(time.perf_counter() - started)
        return samples
    finally:
        children.stop("celery")
        baseline.app.close()


# --- Loom modes ---------------------------------------------------------------------------------


def _execution_s(action: Any) -> float:
    return max(0.0, action.timings.execution_s or 0.0)


async def single_mode(
    url: str,
    key: str,
    concurrency: int,
    total: int,
    legs: dict[str, list[float]] | None = None,
    *,
    one_request: bool = False,
    coalesce: bool = True,
    requests: list[int] | None = None,
) -> list[float]:
    """``concurrency`` clients each submit one action and wait for it, ``total`` in all, through
    one ``AsyncClient`` (concurrent calls coalesced unless ``coalesce`` is False).

    ``legs`` (optional) collects where the time went: the submit request, submitted →
    scheduled and scheduled → started (server clocks), and the result request. ``requests``
    (optional) gets the number of HTTP requests sent.
    """
    import httpx
    from loom import AsyncClient

    limits = httpx.Limits(max_connections=concurrency + 10, max_keepalive_connections=concurrency)
    overheads: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(total):
        queue.put_nowait(index)
    transport = httpx.AsyncHTTPTransport(limits=limits)
    sent = [0]

    async def count(request: httpx.Request) -> None:
        sent[0] += 1

    async with AsyncClient(
        url, key, timeout_s=120.0, transport=transport, coalesce=coalesce
    ) as client:
        client._http.event_hooks["request"].append(count)

        async def worker() -> None:
            while not queue.empty():
                queue.get_nowait()
                started = time.perf_counter()
                if one_request:
                    done = await client.run(**NOOP, timeout=120)
                    submitted = started
                else:
                    action = await client.submit(**NOOP)
                    submitted = time.perf_counter()
                    done = await client.result(action.id, timeout=120)
                elapsed = time.perf_counter() - started
                assert done.status == "succeeded", done
                overheads.append(elapsed - _execution_s(done))
                if legs is not None:
                    legs["submit_request"].append(submitted - started)
                    legs["result_request"].append(elapsed - (submitted - started))
                    legs["submitted_to_scheduled"].append(done.timings.queueing_s or 0.0)
                    legs["scheduled_to_started"].append(done.timings.overhead_s or 0.0)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    if requests is not None:
        requests.append(sent[0])
    return overheads


def rest_single_mode(url: str, key: str, total: int, *, one_request: bool) -> list[float]:
    """One client on one keep-alive HTTP/1.1 connection (the standard library's, so what is
    measured is the control plane, not a client library): ``POST /actions/?wait=30`` (one
    request), or ``POST /actions/`` then ``GET /actions/{id}/result?wait=30`` (two)."""
    import http.client
    import json
    from urllib.parse import urlsplit

    from loom.types import Action

    target = urlsplit(url)
    connection = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def call(method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = json.dumps(body) if body is not None else None
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        data = json.loads(response.read())
        assert response.status in (200, 201), (response.status, data)
        return dict(data)

    overheads: list[float] = []
    try:
        for _ in range(total):
            body = {**NOOP, "idempotency_key": uuid.uuid4().hex}
            started = time.perf_counter()
            if one_request:
                done = call("POST", "/api/v1/actions/?wait=30", body)
            else:
                submitted = call("POST", "/api/v1/actions/", body)
                done = call("GET", f"/api/v1/actions/{submitted['id']}/result/?wait=30")
            elapsed = time.perf_counter() - started
            assert done["status"] == "succeeded", done
            overheads.append(elapsed - _execution_s(Action.from_api(done)))
    finally:
        connection.close()
    return overheads


def durable_commits(database_url: str, count: int) -> list[float]:
    """Seconds of one synchronous commit (a one-row UPDATE in autocommit) on the run's database.
    ``rest_run@1``'s path holds two such commits in series — the scheduled transition (an action
    runs at most once) and its end (what the client is told is on disk); the submission's own
    insert commits lazily (``hot_path.flush_commits``). So two of these are the part of its time
    that durability costs."""
    import psycopg

    samples: list[float] = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_commit_floor (id int PRIMARY KEY, n int NOT NULL)")
        conn.execute("INSERT INTO bench_commit_floor VALUES (1, 0)")
        for _ in range(count):
            started = time.perf_counter()
            conn.execute("UPDATE bench_commit_floor SET n = n + 1 WHERE id = 1")
            samples.append(time.perf_counter() - started)
        conn.execute("DROP TABLE bench_commit_floor")
    return samples


def healthz_latencies(url: str, count: int) -> list[float]:
    """``GET /healthz`` on one keep-alive connection: a server's floor per request."""
    import http.client
    from urllib.parse import urlsplit

    target = urlsplit(url)
    connection = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port)
    samples = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            response.read()
            samples.append(time.perf_counter() - started)
            assert response.status == 200, response.status
    finally:
        connection.close()
    return samples


def web_floor(env: dict[str, str], children: Children, url: str, count: int) -> dict[str, Any]:
    """The per-request floor of the web tier as served (Django's WSGI handler behind the one-hop
    bridge, ``controlplane/http_bridge.py``) and, as its baseline, of Django's own ASGI handler
    under the same uvicorn: why the bridge exists, measured."""
    port = free_port()
    children.spawn(
        "web-django-asgi",
        [
            sys.executable, "-m", "uvicorn", "--factory",
            "django.core.asgi:get_asgi_application", "--host", "127.0.0.1", "--port",
            str(port), "--log-level", "warning", "--no-access-log",
        ],
        env,
    )  # fmt: skip
    try:
        wait_for(lambda: listening(port), 60, "Django's ASGI handler")
        baseline_url = f"http://127.0.0.1:{port}"
        healthz_latencies(url, 50)
        healthz_latencies(baseline_url, 50)
        bridge: list[float] = []
        django_asgi: list[float] = []
        for _ in range(5):  # interleaved rounds
            bridge += healthz_latencies(url, count // 5)
            django_asgi += healthz_latencies(baseline_url, count // 5)
    finally:
        children.stop("web-django-asgi")
    return {"bridge": _summary(bridge), "django_asgi_handler": _summary(django_asgi)}


async def batch_mode(url: str, key: str, size: int, batches: int) -> dict[str, list[float]]:
    """``batches`` times: submit_batch of ``size``, then as_completed over them."""
    from loom import AsyncClient

    amortised: list[float] = []
    latencies: list[float] = []
    async with AsyncClient(url, key, timeout_s=120.0) as client:
        for _ in range(batches):
            started = time.perf_counter()
            actions = await client.submit_batch([NOOP] * size)
            execution = 0.0
            async for done in client.as_completed([a.id for a in actions], timeout=120):
                assert done.status == "succeeded", done
                latencies.append(time.perf_counter() - started - _execution_s(done))
                execution = max(execution, _execution_s(done))
            amortised.append((time.perf_counter() - started - execution) / size)
    return {"amortised": amortised, "latency": latencies}


# --- orchestration --------------------------------------------------------------------------------


def _summary(samples: list[float]) -> dict[str, float]:
    return {
        "n": float(len(samples)),
        "p50_ms": percentile(samples, 50) * 1000,
        "p99_ms": percentile(samples, 99) * 1000,
        "mean_ms": statistics.fmean(samples) * 1000 if samples else float("nan"),
    }


def measure(sizes: dict[str, Any]) -> dict[str, Any]:
    """Start everything, run every mode at ``sizes``, stop everything (the test's entry too)."""
    with (
        throwaway_database("overhead") as database,
        redis_prefix("overhead") as prefix,
        tempfile.TemporaryDirectory(prefix="loom-overhead-") as scratch,
    ):
        seeded = run_child("bench.overhead.seed", django_env(database, prefix=prefix))
        env = django_env(database, redis=redis_url(), prefix=prefix)
        children = Children(Path(scratch))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        try:
            children.spawn(
                "web",
                [
                    sys.executable, "-m", "uvicorn", "controlplane.asgi:application",
                    "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
                    "--no-access-log",
                ],
                env,
            )  # fmt: skip
            children.spawn("scheduler", scheduler_argv(POOL, prefix), env)
            children.spawn(
                "agent", cpu_agent_argv(POOL, NODE, prefix, Path(scratch) / "work", "0"), env
            )
            wait_for(lambda: listening(port), 60, "the web server")
            warm = asyncio.run(single_mode(url, seeded["key"], 1, 1))  # scheduler + agent up
            assert warm, children.log_tail("scheduler")
            results: dict[str, Any] = {
                "celery": _summary(celery_round_trips(children, sizes["celery"])),
                "web_floor_healthz": web_floor(env, children, url, sizes["healthz"]),
                "durable_commit": _summary(durable_commits(database, sizes["celery"])),
            }
            # Single actions through the REST API, one client: interleaved rounds of the four
            # forms, so the machine's noise lands on all of them alike.
            rest: dict[str, list[float]] = defaultdict(list)
            legs: dict[str, list[float]] = defaultdict(list)
            rounds = 5
            per_round = max(1, sizes["rest"] // rounds)
            for _ in range(rounds):
                key = seeded["key"]
                rest["rest_run@1"] += rest_single_mode(url, key, per_round, one_request=True)
                rest["rest_two@1"] += rest_single_mode(url, key, per_round, one_request=False)
                rest["sdk_run@1"] += asyncio.run(
                    single_mode(url, key, 1, per_round, one_request=True)
                )
                rest["single@1"] += asyncio.run(single_mode(url, key, 1, per_round, legs))
            for name, samples in rest.items():
                results[name] = _summary(samples)
            results["single@1_legs"] = {k: _summary(v) for k, v in legs.items()}
            # Many clients at once through one AsyncClient: one request per call (the baseline)
            # vs the SDK's default, concurrent calls coalesced into batched requests.
            for concurrency, total in sizes["single"]:
                for coalesce, name in ((False, "uncoalesced"), (True, "coalesced")):
                    sent: list[int] = []
                    started = time.perf_counter()
                    samples = asyncio.run(
                        single_mode(
                            url, seeded["key"], concurrency, total, coalesce=coalesce,
                            requests=sent,
                        )
                    )  # fmt: skip
                    elapsed = time.perf_counter() - started
                    results[f"single@{concurrency}_{name}"] = _summary(samples) | {
                        "requests_per_action": sent[0] / total,
                        "actions_per_s": total / elapsed,
                    }
            for size, batches in sizes["batch"]:
                measured = asyncio.run(batch_mode(url, seeded["key"], size, batches))
                results[f"batch@{size}"] = {
                    "amortised": _summary(measured["amortised"]),
                    "latency": _summary(measured["latency"]),
                }
            quiet = django_env(database, prefix=prefix)
            results["throughput"] = run_child(
                "bench.overhead.throughput",
                quiet,
                seeded["job"],
                sizes["throughput"],
                redis_url(),
                prefix,
            )
        except Exception as exc:
            logs = "\n".join(
                f"--- {n}\n{children.log_tail(n)}" for n in ("web", "scheduler", "agent")
            )
            raise RuntimeError(f"{exc}\n{logs}") from exc
        finally:
            children.stop_all()
    return results


def _plot(results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, p50, p99 = [], [], []
    for name, value in results.items():
        summary = value.get("amortised", value) if isinstance(value, dict) else None
        if (
            name in ("throughput", "single@1_legs", "web_floor_healthz", "durable_commit")
            or summary is None
        ):
            continue
        labels.append(name if name == "celery" else f"loom {name}")
        p50.append(summary["p50_ms"])
        p99.append(summary["p99_ms"])
    fig, ax = plt.subplots(figsize=(8, 4))
    positions = range(len(labels))
    ax.bar([p - 0.2 for p in positions], p50, width=0.4, label="p50")
    ax.bar([p + 0.2 for p in positions], p99, width=0.4, label="p99")
    ax.set_xticks(list(positions), labels, rotation=20, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("per-action overhead, ms (batch: amortised)")
    ax.set_title("No-op action overhead vs Celery .delay().get(), same Redis, same run")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plot_path("overhead"))
    plt.close(fig)


def run(quick: bool) -> BenchReport:
    sizes: dict[str, Any] = (
        {
            "celery": 200,
            "rest": 200,
            "healthz": 500,
            "single": [(10, 100), (100, 300)],
            "batch": [(1, 30), (100, 5), (1000, 2)],
            "throughput": 5000,
        }
        if quick
        else {
            "celery": 1000,
            "rest": 1000,
            "healthz": 2000,
            "single": [(10, 1000), (100, 1000), (1000, 2000)],
            "batch": [(1, 200), (100, 30), (1000, 10)],
            "throughput": 20000,
        }
    )
    report = BenchReport(
        benchmark="overhead",
        quick=quick,
        params={
            "sizes": sizes,
            "noop_demand": NOOP["demand"],
            "web": "uvicorn, 1 worker, ASGI",
            "transport": "redis streams",
            "baseline": "celery .delay().get(), solo pool, same Redis (broker and backend)",
        },
    )
    try:
        results = measure(sizes)
    except Unavailable as exc:
        return report.skip(exc)
    report.series = results
    celery_p50 = results["celery"]["p50_ms"]
    for size in (100, 1000):
        name = f"batch@{size}"
        if name in results:
            ratio = results[name]["amortised"]["p50_ms"] / celery_p50
            report.targets.append(
                Target.at_most(f"{name}_overhead_p50_over_celery_p50", ratio, 1.0)
            )
    # The absolute figure is information only (series ``rest_run@1``): the target is the ratio.
    single_ratio = results["rest_run@1"]["p50_ms"] / celery_p50
    report.series["rest_run@1"]["over_celery_p50"] = single_ratio
    # Information, not a target: two synchronous commits alone, over the baseline's round trip.
    report.series["durable_commit"]["two_over_celery_p50"] = (
        2 * results["durable_commit"]["p50_ms"] / celery_p50
    )
    report.targets.append(
        Target.at_most(
            "single@1_rest_overhead_p50_over_celery_p50", single_ratio, SINGLE_OVER_CELERY
        )
    )
    rate = results["throughput"]["count"] / results["throughput"]["elapsed_s"]
    report.series["throughput"]["actions_per_s"] = rate
    report.targets.append(Target.at_least("noop_actions_per_s", rate, THROUGHPUT_TARGET))
    _plot(results)
    return report
