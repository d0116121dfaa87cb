"""One system running one reference workload, in a fresh process tree of its own:
``python -m bench._artos_run --system loom|ray --workload JSON --device cpu --out FILE``.

The process makes itself a child subreaper, so everything either system starts is counted by
``bench._artos_cpu`` and reaped here; at the end it checks that no process of the run is left.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._artos_cpu import become_subreaper, tree_cpu_seconds, tree_pids
from bench._artos_workload import Workload


def _reap_all(timeout_s: float = 20.0) -> list[str]:
    """Wait for every descendant; kill (by pid) what is still there after ``timeout_s`` and
    return those, described."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        left = tree_pids()
        if not left:
            return []
        time.sleep(0.1)
    left = tree_pids()
    names = [_described(pid) for pid in left]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    try:
        while os.waitpid(-1, 0)[0] > 0:
            pass
    except ChildProcessError:
        pass
    return names


def _described(pid: int) -> str:
    """``pid (name, state)`` of a process still there, for the run's record of leftovers."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return f"{pid} (gone)"
    name = text[text.index("(") + 1 : text.rindex(")")]
    state = text[text.rindex(")") + 2 :].split()[0]
    return f"{pid} ({name}, {state})"


LEARNER_THREADS = 1  # both systems' learners; intra-op threads on 2 shared cores only contend


def run(system: str, workload: Workload, device: str, lock_dir: str) -> dict[str, Any]:
    """``lock_dir``: the run's own device-lease namespace. Leases are exclusive per node, so
    two bench runs sharing one would serialise their learners (a Ray learner holds its lease
    for the whole job): each run gets its own, as each would on a machine of its own."""
    import torch

    torch.set_num_threads(LEARNER_THREADS)
    subreaper = become_subreaper()
    started = time.monotonic()
    cpu_before, _ = tree_cpu_seconds()
    if system == "loom":
        from bench import _artos_loom

        platform_s, platform_cpu, processes = 0.0, 0.0, 1
        result = _artos_loom.RUNNERS[workload.algorithm](workload, device, lock_dir)
    elif system == "ray":
        from bench import _artos_ray

        ray = _artos_ray.start_ray()
        platform_s = time.monotonic() - started
        platform_cpu, processes = tree_cpu_seconds()
        platform_cpu -= cpu_before
        try:
            result = _artos_ray.RUNNERS[workload.algorithm](ray, workload, device, lock_dir)
            result["ray_processes_after_init"] = processes
        finally:
            ray.shutdown()
    else:
        raise ValueError(f"system: expected loom or ray, got {system!r}")
    killed = _reap_all()
    result.update(
        system=system,
        device=device,
        platform_start_s=platform_s,
        platform_start_cpu_s=platform_cpu,
        total_wall_s=time.monotonic() - started,
        total_cpu_s=tree_cpu_seconds()[0] - cpu_before,
        subreaper=subreaper,
        leftover_processes_killed=len(killed),
        leftover_processes=killed,
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._artos_run")
    parser.add_argument("--system", required=True, choices=["loom", "ray"])
    parser.add_argument("--workload", required=True, help="Workload as JSON")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    workload = Workload.from_json(json.loads(args.workload))
    with tempfile.TemporaryDirectory(prefix="artos-leases-") as lock_dir:
        result = run(args.system, workload, args.device, lock_dir)
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
