"""On-demand learner compute: an exclusive device lease held only while a trigger fired."""

from __future__ import annotations

import os
import queue
import threading

import pytest

from workers.buffers.learner import DeviceLease, LeaseError, OnDemandLearner


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_lease_is_exclusive_per_device_and_names_it(tmp_path):
    first = DeviceLease("cpu", lock_dir=tmp_path)
    second = DeviceLease("cpu", lock_dir=tmp_path)
    first.acquire()
    with pytest.raises(LeaseError, match=r"^cpu: held by another learner"):
        second.acquire(timeout_s=0.05)
    first.release()
    assert second.acquire(timeout_s=5) >= 0
    second.release()
    with pytest.raises(LeaseError, match=r"^cpu: release of a lease that is not held"):
        second.release()


def test_a_waiting_learner_gets_the_device_when_the_holder_releases(tmp_path):
    holder = DeviceLease("cpu", lock_dir=tmp_path)
    waiter = DeviceLease("cpu", lock_dir=tmp_path)
    holder.acquire()
    got = threading.Event()

    def wait_for_it() -> None:
        waiter.acquire(timeout_s=30)
        got.set()
        waiter.release()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    assert not got.wait(0.1)
    holder.release()
    thread.join(timeout=30)
    assert got.is_set()


def test_held_seconds_count_only_the_held_intervals(tmp_path):
    clock = FakeClock()
    lease = DeviceLease("cpu", lock_dir=tmp_path, clock=clock)
    clock.now = 1.0
    lease.acquire()
    clock.now = 3.0
    assert lease.held_s() == 2.0
    lease.release()
    clock.now = 10.0
    lease.acquire()
    clock.now = 10.5
    lease.release()
    assert lease.intervals == [(1.0, 3.0), (10.0, 10.5)] and lease.held_s() == 2.5


def test_bad_devices_are_rejected():
    with pytest.raises(LeaseError, match=r"^device"):
        DeviceLease("tpu")
    with pytest.raises(LeaseError, match=r"^cores"):
        DeviceLease("cpu", cores=[])


def test_the_lease_pins_the_learner_thread_while_held_and_restores_it(tmp_path):
    before = os.sched_getaffinity(0)
    core = min(before)
    lease = DeviceLease("cpu", cores=[core], lock_dir=tmp_path)
    with lease.hold():
        assert os.sched_getaffinity(0) == {core}
    assert os.sched_getaffinity(0) == before


def test_on_demand_learner_holds_the_device_only_while_triggered(tmp_path):
    clock = FakeClock()
    lease = DeviceLease("cpu", lock_dir=tmp_path, clock=clock)
    held_during_step: list[bool] = []
    firings: queue.Queue[dict] = queue.Queue()

    def step(firing: dict) -> None:
        held_during_step.append(lease.held)
        clock.now += 1.0  # one second of learning per firing

    learner = OnDemandLearner(lease, step, firings)
    firings.put({"trigger_id": "learn"})
    firings.put({"trigger_id": "learn"})  # already waiting: served under the same lease
    thread = threading.Thread(target=learner.run, kwargs={"until": lambda: learner.steps_run == 3})
    thread.start()
    idle = threading.Event()
    for _ in range(3000):
        if learner.steps_run == 2 and not lease.held:
            break
        idle.wait(0.01)
    assert learner.steps_run == 2 and not lease.held  # both served, then the device went back
    clock.now += 100.0  # idle: nothing fired
    firings.put({"trigger_id": "learn"})
    thread.join(timeout=30)
    assert held_during_step == [True, True, True]
    assert len(lease.intervals) == 2 and lease.held_s() == 3.0
    assert not lease.held


def test_always_on_learner_holds_the_device_for_its_whole_life(tmp_path):
    clock = FakeClock()
    lease = DeviceLease("cpu", lock_dir=tmp_path, clock=clock)
    firings: queue.Queue[dict] = queue.Queue()

    def step(firing: dict) -> None:
        clock.now += 1.0

    learner = OnDemandLearner(lease, step, firings, always_on=True)
    thread = threading.Thread(target=learner.run, kwargs={"until": lambda: learner.steps_run == 2})
    thread.start()
    waiting = threading.Event()
    for _ in range(3000):
        if lease.held:
            break
        waiting.wait(0.01)
    assert lease.held  # taken at start, before anything fired
    firings.put({})
    clock.now += 100.0
    firings.put({})
    thread.join(timeout=30)
    assert len(lease.intervals) == 1 and lease.held_s() >= 102.0 - 1e-9


@pytest.mark.gpu
def test_a_gpu_lease_moves_the_learner_to_the_device_and_back(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    from workers.algorithms.artos.ppo import PPOConfig, PPOLearner

    learner = PPOLearner(PPOConfig())
    lease = DeviceLease("cuda:0", movable=learner, lock_dir=tmp_path)
    with lease.hold():
        assert learner.device.type == "cuda"
    assert learner.device.type == "cpu"
