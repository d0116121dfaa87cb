"""The zygote forked from the pool's own process (``start_method="fork"``): it runs the actors
as a fresh interpreter's zygote does, leaves the process's exit handlers to the process, and is
only forked when forking is safe."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.workers.actors.programs import SCHEMA_FIELDS
from workers.actors.fork_start import fork_safe
from workers.actors.pool import ActorPool, ActorPoolError
from workers.buffers.schema import Schema
from workers.buffers.workflow import Workflow, WorkflowError

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[3]

# A job that declares a workflow with forked actors, in a process of its own (the test
# process has threads and a ZeroMQ context, where the pool would not fork).
JOB = textwrap.dedent(
    """
    import json, os, queue, sys, tempfile
    from pathlib import Path
    from workers.actors.cartpole import CartPoleProgram, schema_fields
    from workers.algorithms.artos import DataKeyTrigger
    from workers.buffers.schema import Schema
    from workers.buffers.service import BufferClient
    from workers.buffers.workflow import Workflow

    schema = Schema(schema_fields())
    learn = queue.Queue()
    keep = tempfile.TemporaryDirectory(dir=sys.argv[1])  # the job's: its finaliser is the job's
    flow = (
        Workflow("forked")
        .buffer("rollout", schema, capacity=64)
        .trigger("rollout", "learn", DataKeyTrigger(2, 16, schema.keys), learn)
        .actors("actor", count=2, program="workers.actors.cartpole:program", buffer="rollout",
                steps=16, params_key="model_param", start_method="fork")
        .learner("learner", trigger="learn")
    )
    program = CartPoleProgram()
    program.prepare()
    running = flow.start(checkpoint_dir=keep.name)
    pool = running.pool
    zygote = pool._process.pid
    parent = int(Path(f"/proc/{zygote}/stat").read_text().rsplit(")", 1)[1].split()[1])
    client = BufferClient(running.address)
    client.put_object("rollout", "model_param", program.initial_params())
    for actor in flow.actor_names:
        pool.invoke(actor)
    firing = learn.get(timeout=60)
    results = pool.wait(flow.actor_names)
    steps = len(client.sample("rollout", "full_batch")["obs"])
    client.close()
    running.stop()
    print(json.dumps({
        "started_by": pool.started_by, "zygote_parent": parent, "pid": os.getpid(),
        "fired": sorted(firing["actors"]), "sampled": all(r.sampled for r in results.values()),
        "steps": steps, "kept_after_stop": os.path.isdir(keep.name),
    }))
    """
)


def test_a_forked_zygote_runs_the_actors_and_leaves_the_job_its_exit_handlers(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", JOB, str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["started_by"] == "fork" and report["zygote_parent"] == report["pid"]
    assert report["fired"] == ["actor0", "actor1"] and report["sampled"]
    assert report["steps"] == 32
    # the zygote ended before the job looked: it ran none of the job's finalisers
    assert report["kept_after_stop"]


def test_a_pool_in_a_threaded_process_starts_a_fresh_interpreter(served, tmp_path):
    _, address = served  # the server's thread and ZeroMQ context: forking is not safe
    assert not fork_safe()
    pool = ActorPool(
        "tests.workers.actors.programs:program",
        ["a0"],
        tmp_path / "ckpt",
        steps=4,
        sink={"address": address, "buffer": "rollout"},
        start_method="fork",
    )
    with pool:
        assert pool.started_by == "spawn"
        assert pool.run_iteration(["a0"])["a0"].sampled


def test_start_method_is_checked_where_it_is_given(tmp_path):
    with pytest.raises(ActorPoolError, match=r"^start_method: expected one of spawn, fork"):
        ActorPool("x:y", ["a"], tmp_path, steps=1, start_method="thread")
    flow = Workflow("x").buffer("b", Schema(SCHEMA_FIELDS), capacity=4)
    with pytest.raises(WorkflowError, match=r"^actors: start_method must be spawn or fork"):
        flow.actors("actor", count=1, program="x:y", buffer="b", start_method="thread")
