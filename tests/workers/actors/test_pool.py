"""Elastic actors: zygote fork, checkpoint/restore, pinning, pre-warm, a kill mid-sample."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from workers.actors.pool import (
    ActorPool,
    ActorPoolError,
    ActorState,
    assign_cores,
    cold_start_seconds,
)
from workers.actors.prewarm import Prewarmer, actor_start_overhead
from workers.algorithms.artos import DataKeyTrigger, WorkloadMonitor
from workers.buffers.passers import DirectPasser
from workers.buffers.service import BufferClient
from workers.buffers.store import ExperienceBuffer

pytestmark = pytest.mark.processes

PROGRAM = "tests.workers.actors.programs:program"


def make_pool(tmp_path: Path, address: str, actors=("a0", "a1")) -> ActorPool:
    return ActorPool(
        PROGRAM,
        list(actors),
        tmp_path / "ckpt",
        steps=4,
        sink={"address": address, "buffer": "rollout"},
    )


def test_actors_restore_their_checkpoint_and_stay_pinned(served, tmp_path):
    buffer, address = served
    with make_pool(tmp_path, address) as pool:
        first = pool.run_iteration(["a0", "a1"])
        second = pool.run_iteration(["a0", "a1"])
        assert pool.states() == {"a0": "checkpointed", "a1": "checkpointed"}
        for actor in ("a0", "a1"):
            assert not first[actor].restored and second[actor].restored
            assert second[actor].code == 0
            assert second[actor].cores == pool.records[actor].cores
    data = buffer.gather({"a0": (0, 8)})
    assert data["actor_step"].tolist() == list(range(8))  # the counter survived the restore


def test_a_prewarmed_actor_waits_warm_and_starts_without_delay(served, tmp_path):
    _, address = served
    with make_pool(tmp_path, address, actors=("a0",)) as pool:
        pool.run_iteration(["a0"])
        assert pool.prewarm("a0")
        deadline = time.monotonic() + 30
        while pool.states()["a0"] != ActorState.WARM and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.states()["a0"] == "warm"
        pool.invoke("a0")
        done = pool.wait(["a0"])["a0"]
        assert done.prewarmed and done.restored and done.startup_wait_s == 0.0


def kill_a0_mid_sample(
    buffer: ExperienceBuffer, tmp_path: Path, address: str, on_killed: str
) -> tuple[dict, ActorPool]:
    """Run an iteration of a0 and a1 in which a0 writes half its batch, hangs and is killed."""
    (tmp_path / "block-a0").touch()
    client = BufferClient(address)
    results: dict = {}
    with make_pool(tmp_path, address) as pool:

        def iterate() -> None:
            results.update(
                pool.run_iteration(
                    ["a0", "a1"],
                    on_killed=on_killed,
                    drop=lambda actor, since: client.drop_actor("rollout", actor, since),
                )
            )

        thread = threading.Thread(target=iterate)
        thread.start()
        deadline = time.monotonic() + 30
        while not (tmp_path / "written-a0").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert buffer.steps("a0", "x") == 2  # half a batch written, then hung
        pool.kill("a0")
        thread.join(timeout=60)
    client.close()
    return results, pool


def test_an_actor_killed_mid_sample_is_discarded_and_the_iteration_completes(served, tmp_path):
    buffer, address = served
    fired: list[dict] = []
    buffer.bind("learn", DataKeyTrigger(2, 4, ["x", "actor_step"]), DirectPasser(fired.append))
    results, pool = kill_a0_mid_sample(buffer, tmp_path, address, "discard")
    assert results["a0"].code == 0 and results["a0"].sampled
    assert [h.code for h in pool.records["a0"].history] == [-9, 0]
    assert len(fired) == 1
    data = buffer.gather(fired[0]["actors"])
    assert sorted(data["actor_step"].tolist()) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert buffer.snapshot()["held"] == 8  # the killed run's two steps were discarded


def test_prewarmer_arms_only_once_the_monitor_is_stable(served, tmp_path):
    _, address = served
    with make_pool(tmp_path, address, actors=("a0",)) as pool:
        prewarmer = Prewarmer(pool, WorkloadMonitor(window=2, stability=0.2))
        invocations = list(pool.run_iteration(["a0"]).values())
        assert actor_start_overhead(invocations) > 0
        prewarmer.record(invocations, learner_fin=0.5)
        assert prewarmer.arm(time.monotonic(), ["a0"]) is None
        prewarmer.record(invocations, learner_fin=0.5)
        at = prewarmer.arm(time.monotonic(), ["a0"])
        assert at is not None
        deadline = time.monotonic() + 30
        while pool.states()["a0"] != "warm" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.states()["a0"] == "warm"
        prewarmer.cancel()


def test_cold_start_runs_the_same_program_in_a_fresh_interpreter(tmp_path):
    result = cold_start_seconds(PROGRAM, "a0", tmp_path)
    assert result["startup_s"] > result["restore_s"] >= 0


def test_core_assignment_and_bad_input():
    pinned = assign_cores(["a", "b", "c"], 1, cores=[0, 1])
    assert pinned == {"a": (0,), "b": (1,), "c": (0,)}
    with pytest.raises(ActorPoolError, match=r"^cores_each"):
        assign_cores(["a"], 3, cores=[0, 1])
    with pytest.raises(ActorPoolError, match=r"^actors"):
        ActorPool(PROGRAM, ["a", "a"], "/tmp", steps=1)
    bad: tuple[Any, ...] = (-1, 20, True, 1.5, "5")
    for niceness in bad:
        with pytest.raises(ActorPoolError, match=r"^niceness: expected an integer 0\.\.19"):
            ActorPool(PROGRAM, ["a"], "/tmp", steps=1, niceness=niceness)


def test_actors_run_at_the_pools_niceness_and_the_pools_process_keeps_its_own(served, tmp_path):
    _, address = served
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    with ActorPool(
        PROGRAM,
        ["a0"],
        tmp_path / "ckpt",
        steps=4,
        sink={"address": address, "buffer": "rollout"},
        keep_warm_s=30.0,
        niceness=15,
    ) as pool:
        runs = [pool.run_iteration(["a0"])["a0"] for _ in range(2)]  # forked, then kept warm
    assert [r.niceness for r in runs] == [max(ours, 15)] * 2
    assert os.getpriority(os.PRIO_PROCESS, 0) == ours
    with make_pool(tmp_path, address, actors=("a0",)) as pool:  # by default: the zygote's
        assert pool.run_iteration(["a0"])["a0"].niceness == ours


def test_actor_count_scales_between_iterations_without_a_restart(served, tmp_path):
    _, address = served
    with make_pool(tmp_path, address, actors=("a0", "a1", "a2", "a3")) as pool:
        zygote = pool._process
        small = pool.run_iteration(["a0", "a1"])
        large = pool.run_iteration(["a0", "a1", "a2", "a3"])
        assert pool._process is zygote  # the same zygote: no restart
        assert all(not result.restored for result in small.values())
        assert [large[a].restored for a in ("a0", "a1", "a2", "a3")] == [True, True, False, False]
        assert pool.states()["a3"] == "checkpointed"


def test_an_actor_killed_mid_sample_keeps_its_complete_steps_when_the_policy_says_keep(
    served, tmp_path
):
    buffer, address = served
    results, _ = kill_a0_mid_sample(buffer, tmp_path, address, "keep")
    assert results["a0"].sampled and results["a1"].sampled  # the iteration completed
    # the killed run's two complete steps stay, the re-run's four follow them
    assert buffer.gather({"a0": (0, 6)})["actor_step"].tolist() == [0, 1, 0, 1, 2, 3]
    assert buffer.snapshot()["held"] == 10
