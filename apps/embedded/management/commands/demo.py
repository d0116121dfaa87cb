"""``python manage.py demo``: the embedded control plane with an admin, a demo job and its key.

Migrates, creates the ``admin`` superuser (password generated once, kept in var/) with a staff
API key, and the ``demo`` job with an API key (keys kept in var/ so later runs reprint them), a
CPU pool and a sample tool, prints where everything is, then serves the ASGI app on
127.0.0.1:8000 in-process.
With the server it runs the embedded runtime (a scheduler service per pool, a local CPU agent,
an API agent; in-process transport) and a live demo workload of real sandboxed actions.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from apps.buffers.models import Buffer
from apps.buffers.services import BufferSpec, TriggerSpec, buffer_create
from apps.core.live import pool_snapshot_publish
from apps.embedded.demo_workload import DEMO_BUFFER_NAME, ensure_demo_tools
from apps.jobs import services as job_services
from apps.jobs.authentication import hash_key
from apps.jobs.models import ApiKey, Job
from apps.policies.models import Policy, PolicyKind
from apps.policies.services import policy_create
from apps.resources.models import PoolKind, ResourcePool, Service, ServiceBackend, Tool
from workers.agents.cpu.local import make_private_root

if TYPE_CHECKING:
    from apps.embedded.demo_workload import DemoWorkload
    from apps.embedded.runtime import EmbeddedRuntime

ADMIN_USERNAME = "admin"
DEMO_JOB = "demo"
DEMO_POOL = "cpu-local"
DEMO_GPU_POOL = "gpu-local"
# The demo's GPU services: a reward model and a teacher (per-token log-probs) that the GPU agent
# builds from random-weight checkpoints written under var/models (arl-tangram §5.3's MOPD and
# reward-model services, in small).
DEMO_SERVICES = (("reward-model", "reward"), ("teacher", "logprobs"))
# The demo's experience buffer (artos §4): each finished trajectory's reward, tokens and steps,
# one actor per workload slot; a learner would be triggered by every 4 steps an actor collects.
DEMO_BUFFER = BufferSpec(
    name=DEMO_BUFFER_NAME,
    schema={
        "reward": {"shape": [], "dtype": "float32"},
        "tokens": {"shape": [], "dtype": "int64"},
        "steps": {"shape": [], "dtype": "int64"},
    },
    capacity=1024,
    eviction="fifo",
    sampler="uniform",
    sync_mode="off_policy",
    triggers=(
        TriggerSpec(name="learn", kind="data_key", params={"n": 1, "size": 4, "keys": ["reward"]}),
    ),
)


def _kept_secret(path: Path, make: Any) -> tuple[str, bool]:
    """A secret kept in ``path`` (mode 600); returns it and whether it was just made."""
    if path.exists():
        return path.read_text().strip(), False
    path.parent.mkdir(parents=True, exist_ok=True)
    value = make()
    path.write_text(value + "\n")
    path.chmod(0o600)
    return value, True


def _kept_key(path: Path, *, job: Job | None, user: User | None, created_by: User) -> str:
    """The raw key kept in ``path`` if it is still valid, else a new one (kept there)."""
    raw_key = path.read_text().strip() if path.exists() else ""
    if (
        raw_key
        and ApiKey.objects.filter(
            key_hash=hash_key(raw_key), job=job, user=user, revoked_at__isnull=True
        ).exists()
    ):
        return raw_key
    _, raw_key = job_services.api_key_create(job=job, user=user, name="demo", created_by=created_by)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(raw_key + "\n")
    path.chmod(0o600)
    return raw_key


@contextlib.asynccontextmanager
async def embedded_demo(
    *, workload: bool, llm_port: int | None = 0, **workload_options: Any
) -> AsyncIterator[tuple[EmbeddedRuntime, DemoWorkload | None]]:
    """The embedded runtime, the LLM router on ``llm_port`` in front of the CPU engine (None:
    no LLM) and (``workload``) the demo workload, running until the block ends.

    Working directories go under LOOM_SANDBOX_ROOT: outside the repository, so no project
    configuration of Loom's reaches an action; one directory per checkout (its ``var/``), never
    shared by two checkouts' demos, emptied at start since a SIGTERM'd server (uvicorn re-raises
    the signal once it has shut down) never reaches the clean-up below.
    """
    from apps.embedded.buffers import EmbeddedBuffers
    from apps.embedded.demo_workload import DemoWorkload, LlmEndpoint
    from apps.embedded.llm import EmbeddedLlm
    from apps.embedded.runtime import EmbeddedRuntime

    sandbox_root = Path(settings.LOOM_SANDBOX_ROOT)
    make_private_root(sandbox_root)
    checkout = hashlib.sha256(str(Path(settings.VAR_DIR).resolve()).encode()).hexdigest()[:12]
    work_root = sandbox_root / f"demo-{checkout}"
    shutil.rmtree(work_root, ignore_errors=True)
    runtime = EmbeddedRuntime(work_root=work_root, publish_snapshot=pool_snapshot_publish)
    llm = None if llm_port is None else EmbeddedLlm(port=llm_port)
    buffers = EmbeddedBuffers()
    stop = asyncio.Event()
    tasks = []
    demo = None
    try:
        await runtime.start()
        await asyncio.to_thread(buffers.start)
        if llm is not None:
            await llm.start()
        if workload:
            job, pool, gpu_pool = await asyncio.to_thread(
                lambda: (
                    Job.objects.get(name=DEMO_JOB),
                    ResourcePool.objects.get(name=DEMO_POOL),
                    ResourcePool.objects.filter(name=DEMO_GPU_POOL).first(),
                )
            )
            endpoint = None
            if llm is not None:
                raw_key = (Path(settings.VAR_DIR) / "demo_api_key").read_text().strip()
                endpoint = LlmEndpoint(url=llm.url, api_key=raw_key, model=llm.model_name)
            demo = DemoWorkload(
                job=job, pool=pool, gpu_pool=gpu_pool, llm=endpoint, **workload_options
            )
            tasks.append(asyncio.create_task(demo.run(stop)))
        yield runtime, demo
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        if llm is not None:
            await llm.stop()
        await asyncio.to_thread(buffers.stop)
        await runtime.stop()
        shutil.rmtree(work_root, ignore_errors=True)


async def serve_embedded(*, host: str, port: int, llm_port: int, workload: bool) -> None:
    """The web app, the runtime, the LLM router and the demo workload in one event loop until
    Ctrl-C."""
    import uvicorn

    from apps.embedded.rollups import RollupThread

    async with embedded_demo(workload=workload, llm_port=llm_port):
        rollups = RollupThread()  # no Celery beat in the embedded mode: history is written here
        rollups.start()
        config = uvicorn.Config(
            "controlplane.asgi:application", host=host, port=port, log_level="info", lifespan="off"
        )
        try:
            await uvicorn.Server(config).serve()
        finally:
            rollups.stop()


class Command(BaseCommand):
    help = "Set up and serve the embedded Loom demo on http://127.0.0.1:8000"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-serve", action="store_true", help="set up and print, no server")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--llm-port", type=int, default=8100, help="the OpenAI-compatible LLM router's port"
        )
        parser.add_argument(
            "--no-workload", action="store_true", help="serve and schedule, but submit nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        var_dir = Path(settings.VAR_DIR)
        password, raw_key, staff_key = self._set_up(var_dir)
        base = f"http://{options['host']}:{options['port']}"
        llm = f"http://{options['host']}:{options['llm_port']}/v1"
        self._print_summary(base, llm, password, raw_key, staff_key)
        if options["no_serve"]:
            return
        try:
            asyncio.run(
                serve_embedded(
                    host=options["host"],
                    port=options["port"],
                    llm_port=options["llm_port"],
                    workload=not options["no_workload"],
                )
            )
        except KeyboardInterrupt:  # Ctrl-C: asyncio.run stopped everything, then re-raised it
            self.stdout.write("stopped")

    @transaction.atomic
    def _set_up(self, var_dir: Path) -> tuple[str, str, str]:
        user_model = get_user_model()
        password, _ = _kept_secret(var_dir / "admin_password", lambda: secrets.token_urlsafe(12))
        admin = user_model.objects.filter(username=ADMIN_USERNAME).first()
        if admin is None:
            admin = user_model.objects.create_superuser(ADMIN_USERNAME, "", password)
        elif not admin.check_password(password):
            admin.set_password(password)
            admin.save(update_fields=["password"])

        job = Job.objects.filter(name=DEMO_JOB).first()
        if job is None:
            job, _ = job_services.job_create(
                name=DEMO_JOB, owner=admin, description="created by `make demo`", with_key=False
            )
        raw_key = _kept_key(var_dir / "demo_api_key", job=job, user=None, created_by=admin)
        staff_key = _kept_key(var_dir / "admin_api_key", job=None, user=admin, created_by=admin)

        pool, _ = ResourcePool.objects.get_or_create(
            name=DEMO_POOL, defaults={"kind": PoolKind.CPU, "description": "this machine"}
        )
        if not Policy.objects.filter(pool=pool, kind=PolicyKind.ACTION_SCHEDULER).exists():
            max_dop = min(32, len(os.sched_getaffinity(0)))
            policy_create(
                name=f"{DEMO_POOL}-scheduler",
                kind=PolicyKind.ACTION_SCHEDULER,
                pool=pool,
                author=admin,
                # No more units than this machine's agent registers (the policy check's bound).
                settings={"algorithm": "elastic", "depth": 2, "min_dop": 1, "max_dop": max_dop},
                comment="created by make demo",
            )
        ensure_demo_tools(pool)
        gpu_pool, _ = ResourcePool.objects.get_or_create(
            name=DEMO_GPU_POOL,
            defaults={"kind": PoolKind.GPU, "description": "GPU services (CPU stand-ins here)"},
        )
        for name, task in DEMO_SERVICES:
            Service.objects.get_or_create(
                name=name,
                defaults={
                    "pool": gpu_pool,
                    "backend": ServiceBackend.TORCH,
                    "task": task,
                    "model": str(var_dir / "models" / name),
                    "allowed_dop": [1, 2],
                    "throughput": {"1": 1.0, "2": 1.6},
                    "max_sequences": 8,
                    "max_tokens": 256,
                    "vocab_size": 512,
                    "description": f"a small random-weight {task} model (make demo)",
                },
            )
        if not Buffer.objects.filter(job=job, name=DEMO_BUFFER.name).exists():
            buffer_create(job=job, spec=DEMO_BUFFER)
        Tool.objects.get_or_create(
            name="python",
            defaults={
                "pool": pool,
                "command_template": (
                    "python3 -c \"import os; print('ran on cores', "
                    "sorted(os.sched_getaffinity(0)), 'dop={dop}')\""
                ),
                "resource_template": {"cpu": {"min": 1, "max": 4}},
                "elasticity": {"resource": "cpu", "efficiency": [1.0, 0.9, 0.8, 0.7]},
                "timeout_s": 60.0,
                "description": "print the cores the sandbox runs on (elastic: {dop} cores)",
            },
        )
        return password, raw_key, staff_key

    def _print_summary(
        self, base: str, llm: str, password: str, raw_key: str, staff_key: str
    ) -> None:
        line = "─" * 72
        curl = (
            f"curl -s -H 'Authorization: Bearer {raw_key}' -H 'Content-Type: application/json' \\\n"
            f'       -d \'{{"tool": "python", "demand": {{"cpu": {{"min": 1, "max": 4}}}}}}\' '
            f"{base}/api/v1/actions/"
        )
        self.stdout.write(
            "\n".join(
                [
                    line,
                    "Loom embedded control plane (SQLite, in-process transport, eager Celery)",
                    line,
                    f"  dashboard    {base}/   (log in as {ADMIN_USERNAME})",
                    f"  API docs     {base}/api/v1/docs/",
                    f"  OpenAPI      {base}/api/v1/schema/",
                    f"  admin        {base}/admin/   user {ADMIN_USERNAME}   password {password}",
                    f"  admin key    {staff_key}   (staff: create jobs, mint keys)",
                    f"  demo job     {DEMO_JOB}   API key {raw_key}",
                    "",
                    "  submit an action:",
                    f"    {curl}",
                    "",
                    f"  LLM router   {llm}   (OpenAI-compatible; name your trajectory in the",
                    "               X-Loom-Trajectory header; llama.cpp on this CPU)",
                    "",
                    "  A live workload of AI-coding trajectories runs on this machine: LLM turns",
                    "  through the router, test suites as elastic reward actions on its cores,",
                    "  a reward model and a teacher as GPU services (evict-on-execution on CPU",
                    "  stand-in devices); watch it live on the dashboard.",
                    line,
                ]
            )
        )
