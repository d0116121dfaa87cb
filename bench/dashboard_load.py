"""Dashboard cost under load: 1 000 actions/s flowing, an operator watching three pages.

Targets: with 1 000 actions per second flowing, the dashboard's server-side cost stays under 10%
of one core and a browser tab under 64 MB of JS heap.

Setup (one run, everything on this machine's loopback):

- a fresh PostgreSQL database created for the run and dropped after it (the local server of
  FACTS.md, or ``LOOM_BENCH_POSTGRES`` = ``postgres://user@host:port``), migrated and seeded with
  one CPU pool, one 512-core node, one job and an admin. Without PostgreSQL it falls back to SQLite
  under a temp dir, whose single writer then limits the load the run can drive;
- a *load process* (the stand-in for scheduler + agents, not counted as dashboard cost) that
  submits ``RATE`` actions per second through the actions service and moves them through
  scheduled → running → succeeded in batches every 100 ms, as the scheduler writes state in batches
  (DESIGN.md "Processes");
- the *web process*: the project's ASGI app under daphne, serving the dashboard;
- Debian's Chromium (playwright) logged in with three tabs open: Overview, Pool ``cpu`` and the
  job's page, all subscribed to live data; ``/metrics`` scraped every 5 s; the rollup task run
  every 10 s (timed on its thread, added to the cost as the Celery beat worker would spend it).

Measured, in two phases of the same run: CPU seconds per wall second (from /proc) of the web
process, of the rollups (timed on their thread) and of PostgreSQL. *Baseline*: the load flows and
nobody watches, no rollups, no scrapes — it gives the database CPU the load itself costs per
action. *Watched*: the browser's three tabs are live, rollups run every 10 s and /metrics is
scraped every 5 s. Dashboard cost = web + rollups + (database − load's per-action database cost ×
actions/s). Also: every tab's JS heap (CDP ``Runtime.getHeapUsage``), the achieved action rate,
live events delivered. Targets: dashboard cost ≤ 0.10 of a core; heap ≤ 64 MB per tab; rate ≥ 90%
of 1 000/s; live events flowed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import BenchReport, Target

ROOT = Path(__file__).resolve().parent.parent
RATE = 1000
TICK_S = 0.1
RUN_AFTER_S = 0.3  # submitted → running
FINISH_AFTER_S = 0.8  # submitted → succeeded (ACT ≈ 0.8 s)
NODE_CORES = 512
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "bench-password-1"
SETTINGS_DEFAULT = "controlplane.settings.test"
LOAD_BOOTSTRAP = (
    "import sys, django; django.setup(); from bench.dashboard_load import load_main; "
    "load_main(*[float(a) if '.' in a else int(a) for a in sys.argv[1:]])"
)


POSTGRES_DEFAULT = "postgres://postgres@127.0.0.1:5432"


def _create_database() -> tuple[str, str]:
    """Create a throwaway PostgreSQL database; returns (its URL, its name), or ("", "")."""
    server = os.environ.get("LOOM_BENCH_POSTGRES", POSTGRES_DEFAULT)
    name = f"loom_bench_dashboard_{os.getpid()}"
    try:
        import psycopg

        with psycopg.connect(f"{server}/postgres", autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception:  # no server here: SQLite instead, recorded in params
        return "", ""
    return f"{server}/{name}", name


def _drop_database(name: str) -> None:
    if not name:
        return
    import psycopg

    server = os.environ.get("LOOM_BENCH_POSTGRES", POSTGRES_DEFAULT)
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _environment(var_dir: Path, database_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = os.environ.get("LOOM_BENCH_SETTINGS", SETTINGS_DEFAULT)
    env["DATABASE_URL"] = database_url
    env["LOOM_VAR_DIR"] = str(var_dir)
    env.pop("REDIS_URL", None)
    env["PYTHONPATH"] = str(ROOT)
    return env


def _django_setup(env: dict[str, str]) -> None:
    for key in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "LOOM_VAR_DIR"):
        os.environ[key] = env[key]
    import django

    django.setup()


def _seed() -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.utils import timezone

    from apps.dashboard.roles import ADMIN_GROUP, roles_ensure
    from apps.jobs.models import Job
    from apps.resources.models import Node, PoolKind, ResourcePool

    call_command("migrate", verbosity=0, interactive=False)
    user = User.objects.create_user(username="bench", password=PASSWORD)
    user.groups.add(roles_ensure()[ADMIN_GROUP])
    pool = ResourcePool.objects.create(name="cpu", kind=PoolKind.CPU)
    node = Node.objects.create(
        name="node-0",
        pool=pool,
        cores=NODE_CORES,
        memory_mb=1 << 20,
        capacity={"cores": NODE_CORES, "memory_mb": 1 << 20, "gpus": []},
        last_heartbeat_at=timezone.now(),
    )
    job = Job.objects.create(name="load", owner=user)
    return {"pool": pool.pk, "node": node.pk, "job": job.pk}


# --- the load process -------------------------------------------------------------------------


def load_main(rate: int, duration_s: float, pool_id: int, node_id: int, job_id: int) -> None:
    """Submit ``rate`` actions/s and drive them to success; prints a JSON summary at the end."""
    from django.utils import timezone

    from apps.actions.models import Action, ActionStatus
    from apps.actions.services import ActionSpec, action_submit_batch
    from apps.core.demand import parse_demand
    from apps.jobs.models import Job

    job = Job.objects.get(pk=job_id)
    demand = parse_demand({"cpu": {"min": 1, "max": 1}})
    spec = ActionSpec(demand=demand, pool_id=pool_id, command="true")
    per_tick = max(1, round(rate * TICK_S))
    pending: list[tuple[float, list[int]]] = []
    running: list[tuple[float, list[int]]] = []
    submitted = finished = 0
    started = time.monotonic()
    next_tick = started
    core = 0
    while time.monotonic() - started < duration_s:
        now = time.monotonic()
        ids = [s.action.pk for s in action_submit_batch(job=job, specs=[spec] * per_tick)]
        submitted += len(ids)
        pending.append((now, ids))
        while pending and now - pending[0][0] >= RUN_AFTER_S:
            _, batch = pending.pop(0)
            moment = timezone.now()
            Action.objects.filter(pk__in=batch, status=ActionStatus.QUEUED).update(
                status=ActionStatus.RUNNING,
                allocation={"cores": [core % NODE_CORES], "units": 1},
                node_id=node_id,
                scheduled_at=moment,
                started_at=moment,
            )
            core += 1
            running.append((now, batch))
        while running and now - running[0][0] >= FINISH_AFTER_S - RUN_AFTER_S:
            _, batch = running.pop(0)
            finished += Action.objects.filter(pk__in=batch, status=ActionStatus.RUNNING).update(
                status=ActionStatus.SUCCEEDED, finished_at=timezone.now(), exit_code=0
            )
        next_tick += TICK_S
        time.sleep(max(0.0, next_tick - time.monotonic()))
    elapsed = time.monotonic() - started
    print(json.dumps({"submitted": submitted, "finished": finished, "elapsed_s": elapsed}))


# --- measurement helpers ----------------------------------------------------------------------


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its reaped children are not counted), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def publisher_cycle_cost(cycles: int = 5) -> dict[str, float]:
    """Milliseconds to compute one round of live snapshots (pool, node, job) from the database.

    The core of the web process's dashboard work; uses whatever database Django is configured
    with (the tests run it at a tiny size).
    """
    from apps.dashboard.live.groups import topic_parse
    from apps.dashboard.live.snapshots import snapshots_collect
    from apps.jobs.models import Job
    from apps.resources.models import Node, ResourcePool

    topics = [topic_parse(f"pool:{p.name}") for p in ResourcePool.objects.all()]
    topics += [topic_parse(f"node:{n.pk}") for n in Node.objects.all()]
    topics += [topic_parse(f"job:{j.pk}") for j in Job.objects.all()[:5]]
    timings = []
    published = 0
    for _ in range(cycles):
        started = time.perf_counter()
        published = len(snapshots_collect(topics))
        timings.append((time.perf_counter() - started) * 1000)
    return {
        "topics": float(len(topics)),
        "snapshots": float(published),
        "mean_ms": sum(timings) / len(timings),
        "max_ms": max(timings),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(url: str, timeout_s: float = 30) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout_s} s")


def _scrape_metric(base: str, name: str) -> float:
    import httpx

    text = httpx.get(f"{base}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def database_cpu_seconds() -> float:
    """CPU of every PostgreSQL process on this machine, exited backends included.

    Live processes' utime + stime plus each one's cutime + cstime, which for the postmaster holds
    the backends that have already exited (a connection per request ends its backend).
    """
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        if not name.startswith("postgres"):
            continue
        fields = text.rsplit(")", 1)[1].split()
        ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK")


def _phase(server_pid: int, seconds: float, base: str, dashboard_work: bool) -> dict[str, float]:
    """CPU of the web process and of the database over ``seconds``.

    With ``dashboard_work`` the beat's rollups run every 10 s (timed on this thread) and
    ``/metrics`` is scraped every 5 s; without it only the load flows (the baseline).
    """
    from apps.actions.models import Action, ActionStatus
    from apps.metrics.services import rollup_write

    succeeded_before = Action.objects.filter(status=ActionStatus.SUCCEEDED).count()
    database_before = database_cpu_seconds()
    cpu_before = process_cpu_seconds(server_pid)
    wall_before = time.monotonic()
    rollup_cpu = 0.0
    rollups = 0
    next_scrape = next_rollup = wall_before
    while time.monotonic() - wall_before < seconds:
        now = time.monotonic()
        if dashboard_work and now >= next_scrape:
            _scrape_metric(base, "loom_pool_waiting_actions")
            next_scrape += 5
        if dashboard_work and now >= next_rollup:
            thread_before = time.thread_time()
            rollup_write(bucket_s=10)
            rollup_cpu += time.thread_time() - thread_before
            rollups += 1
            next_rollup += 10
        time.sleep(0.05)
    wall = time.monotonic() - wall_before
    cpu = process_cpu_seconds(server_pid) - cpu_before
    database = database_cpu_seconds() - database_before
    succeeded = Action.objects.filter(status=ActionStatus.SUCCEEDED).count() - succeeded_before
    return {
        "actions_succeeded_per_s": succeeded / wall,
        "database_cpu_s": database,
        "database_cores": database / wall,
        "wall_s": wall,
        "web_cpu_s": cpu,
        "web_cores": cpu / wall,
        "rollups": float(rollups),
        "rollup_cpu_s": rollup_cpu,
        "rollup_cores": rollup_cpu / wall,
    }


def _open_dashboard(browser: Any, base: str, job_id: int) -> list[Any]:
    context = browser.new_context(base_url=base, viewport={"width": 1400, "height": 1000})
    first = context.new_page()
    first.goto("/login/")
    first.fill('input[name="username"]', "bench")
    first.fill('input[name="password"]', PASSWORD)
    first.click('button[type="submit"]')
    first.wait_for_selector('[data-live-state="live"]')
    pages = [first]
    for path in ("/pools/cpu", f"/jobs/{job_id}"):
        page = context.new_page()
        page.goto(path)
        page.wait_for_selector('[data-live-state="live"]')
        pages.append(page)
    return pages


def _heap_mb(page: Any) -> dict[str, float]:
    session = page.context.new_cdp_session(page)
    before = session.send("Runtime.getHeapUsage")
    session.send("HeapProfiler.collectGarbage")
    after = session.send("Runtime.getHeapUsage")
    session.detach()
    return {
        "used_mb": before["usedSize"] / 2**20,
        "total_mb": before["totalSize"] / 2**20,
        "used_after_gc_mb": after["usedSize"] / 2**20,
    }


def run(quick: bool) -> BenchReport:
    baseline_s, watched_s = (6.0, 14.0) if quick else (15.0, 45.0)
    report = BenchReport(
        benchmark="dashboard_load",
        quick=quick,
        params={
            "rate_actions_per_s": RATE,
            "tick_s": TICK_S,
            "act_s": FINISH_AFTER_S,
            "baseline_s": baseline_s,
            "watched_s": watched_s,
            "pages": ["/", "/pools/cpu", "/jobs/<id>"],
            "snapshot_interval_s": 1.0,
            "rollup_every_s": 10,
            "metrics_scrape_every_s": 5,
        },
    )
    if not Path(CHROMIUM).exists():
        report.series["skipped"] = f"{CHROMIUM} missing: apt-get install -y chromium"
        report.targets.append(Target.is_true("chromium_available", False))
        return report
    database_url, database_name = _create_database()
    report.params["database"] = "postgresql" if database_url else "sqlite"
    with tempfile.TemporaryDirectory(prefix="loom-bench-") as tmp:
        env = _environment(Path(tmp), database_url)
        _django_setup(env)
        ids = _seed()
        from django.conf import settings

        module, attribute = settings.ASGI_APPLICATION.rsplit(".", 1)
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                f"{module}:{attribute}",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        load = None
        try:
            _wait_http(f"{base}/login/")
            load = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    LOAD_BOOTSTRAP,
                    str(RATE),
                    f"{baseline_s + watched_s + 15:.1f}",
                    str(ids["pool"]),
                    str(ids["node"]),
                    str(ids["job"]),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
            )
            time.sleep(2.0)  # let the load reach its steady state
            baseline = _phase(server.pid, baseline_s, base, dashboard_work=False)
            from playwright.sync_api import sync_playwright

            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # ORM calls beside playwright's loop
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                pages = _open_dashboard(browser, base, ids["job"])
                events_before = _scrape_metric(base, "loom_dashboard_events_sent_total")
                watched = _phase(server.pid, watched_s, base, dashboard_work=True)
                events = _scrape_metric(base, "loom_dashboard_events_sent_total") - events_before
                heaps = {page.url.split(str(port), 1)[1]: _heap_mb(page) for page in pages}
                waiting_text = pages[0].locator('[data-stat="waiting"]').inner_text()
                browser.close()
            cycle = publisher_cycle_cost(3)
        finally:
            if load is not None:
                load.terminate()
            server.terminate()
            server.wait(10)
            if load is not None:
                load.wait(30)
            from django.db import connections

            connections.close_all()
            _drop_database(database_name)
    achieved = watched["actions_succeeded_per_s"]
    # The load's own database work, per action, from the baseline; what the database did beyond
    # that while the dashboard was watched is the dashboard's (its queries, rollups, scrapes).
    database_per_action = baseline["database_cores"] / max(baseline["actions_succeeded_per_s"], 1)
    dashboard_database = max(0.0, watched["database_cores"] - database_per_action * achieved)
    watched_cost = watched["web_cores"] + watched["rollup_cores"] + dashboard_database
    baseline_cost = baseline["web_cores"] + baseline["rollup_cores"]
    max_heap = max(h["used_mb"] for h in heaps.values())
    report.series = {
        "baseline_nobody_watching": baseline,
        "watched_three_tabs": watched,
        "dashboard_database_cores": dashboard_database,
        "dashboard_cost_cores": watched_cost,
        "dashboard_cost_delta_vs_baseline_cores": watched_cost - baseline_cost,
        "live_events_delivered": events,
        "live_events_per_s": events / watched["wall_s"],
        "heap_per_tab": heaps,
        "overview_waiting_shown": waiting_text,
        "achieved_actions_per_s_while_watched": achieved,
        "snapshot_round_after_run": cycle,
    }
    report.targets = [
        Target.at_least("achieved_actions_per_s_ratio_to_1000", achieved / RATE, 0.9),
        Target.at_most("dashboard_server_cost_cores_watched", watched_cost, 0.10),
        Target.at_most("browser_tab_js_heap_mb_max", max_heap, 64.0),
        Target.is_true("live_events_flowed", events > 0),
    ]
    return report
