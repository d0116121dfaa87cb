"""On-demand learner compute (artos §4.3 "On-demand GPU Service"): the learner holds its device
only while a trigger has fired and its update runs, not for the whole training run.

A ``DeviceLease`` is an exclusive lease on one learner device of this node: a GPU (``cuda:N``)
or, where there is none, a set of cores. Exclusivity is an ``flock`` on the device's lock file,
so two learners (two jobs, two processes) never hold the same device at once and a crashed
holder's lease ends with its process. While held, the learner's thread is pinned to the lease's
cores and the learner's model and optimiser state live on the device; on release they move back
to host memory (a GPU's memory is free for the next learner). The lease records every held
interval, which is the learner device-seconds the ARTOS benches compare.

``OnDemandLearner`` runs a learner step per trigger firing (a ``QueuePasser`` target), taking
the lease when the first firing arrives and giving it back once no firing is waiting;
``always_on`` takes it once for the learner's life, as a long-running learner process does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from workers.algorithms.artos import Firing


class LeaseError(RuntimeError):
    """The lease cannot do what was asked; the message names the device."""


class Movable(Protocol):
    def to(self, device: str) -> None: ...


def _lock_name(device: str, cores: Sequence[int]) -> str:
    if device == "cpu":
        return "cpu-" + "-".join(str(c) for c in cores)
    return device.replace(":", "-")


class DeviceLease:
    """An exclusive, re-entrant-free lease on a learner device, with its held intervals."""

    def __init__(
        self,
        device: str = "cpu",
        cores: Sequence[int] | None = None,
        movable: Movable | None = None,
        lock_dir: str | Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if device != "cpu" and not device.startswith("cuda"):
            raise LeaseError(f"device: expected 'cpu' or 'cuda[:N]', got {device!r}")
        self.device = device
        self.cores = tuple(sorted(cores if cores is not None else os.sched_getaffinity(0)))
        if not self.cores:
            raise LeaseError("cores: a lease needs at least one core")
        self.movable, self.clock = movable, clock
        directory = Path(lock_dir or Path(tempfile.gettempdir()) / "loom-learner-devices")
        directory.mkdir(parents=True, exist_ok=True)
        self.lock_path = directory / f"{_lock_name(device, self.cores)}.lock"
        self.intervals: list[tuple[float, float]] = []
        self._held_since: float | None = None
        self._fd: int | None = None
        self._previous_affinity: set[int] | None = None

    @property
    def held(self) -> bool:
        return self._held_since is not None

    def acquire(self, timeout_s: float | None = None) -> float:
        """Take the device (waits while another learner holds it); returns the wait."""
        if self.held:
            raise LeaseError(f"{self.device}: this lease is already held")
        started = self.clock()
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if timeout_s is not None and self.clock() - started > timeout_s:
                        raise LeaseError(f"{self.device}: held by another learner") from None
                    time.sleep(0.001)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._previous_affinity = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.cores)  # this thread only (Linux: tid 0 is the caller)
        if self.movable is not None:
            self.movable.to(self.device)
        self._held_since = self.clock()
        return self._held_since - started

    def release(self) -> float:
        """Give the device back; returns how long it was held."""
        if self._held_since is None or self._fd is None:
            raise LeaseError(f"{self.device}: release of a lease that is not held")
        if self.movable is not None and self.device != "cpu":
            self.movable.to("cpu")
            _free_device_cache(self.device)
        if self._previous_affinity is not None:
            os.sched_setaffinity(0, self._previous_affinity)
        ended = self.clock()
        self.intervals.append((self._held_since, ended))
        self._held_since = None
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
        return ended - self.intervals[-1][0]

    @contextlib.contextmanager
    def hold(self) -> Iterator[DeviceLease]:
        self.acquire()
        try:
            yield self
        finally:
            self.release()

    def held_s(self, now: float | None = None) -> float:
        """Seconds held so far (closed intervals plus the open one)."""
        total = sum(end - start for start, end in self.intervals)
        if self._held_since is not None:
            total += (self.clock() if now is None else now) - self._held_since
        return total


def _free_device_cache(device: str) -> None:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


class OnDemandLearner:
    """A learner that holds its device only while triggered (or, ``always_on``, throughout)."""

    def __init__(
        self,
        lease: DeviceLease,
        step: Callable[[Firing], Any],
        firings: queue.Queue[Firing] | None = None,
        always_on: bool = False,
    ) -> None:
        self.lease, self.step, self.always_on = lease, step, always_on
        self.firings: queue.Queue[Firing] = firings if firings is not None else queue.Queue()
        self.stopping = threading.Event()
        self.steps_run = 0
        self.busy_s = 0.0

    def run(self, until: Callable[[], bool] = lambda: False, poll_s: float = 0.05) -> None:
        """Serve firings until ``until()`` is true after a step, or ``stop`` is called."""
        if self.always_on:
            self.lease.acquire()
        try:
            while not self.stopping.is_set():
                try:
                    firing = self.firings.get(timeout=poll_s)
                except queue.Empty:
                    continue
                if self._serve(firing, until):
                    return
        finally:
            if self.lease.held:
                self.lease.release()

    def _serve(self, firing: Firing, until: Callable[[], bool]) -> bool:
        """Hold the device for this firing and any already waiting; True when ``until``."""
        if not self.lease.held:
            self.lease.acquire()
        try:
            while True:
                started = time.perf_counter()
                self.step(firing)
                self.busy_s += time.perf_counter() - started
                self.steps_run += 1
                if until():
                    return True
                try:
                    firing = self.firings.get_nowait()
                except queue.Empty:
                    return False
        finally:
            if not self.always_on and self.lease.held:
                self.lease.release()

    def stop(self) -> None:
        self.stopping.set()
