"""The scheduler_pass target point before and after a change to the pass, in one run.

``python -m bench._tangram_pass_ab [BEFORE_COMMIT] [RUNS] [PASSES]`` exports the tree at
``BEFORE_COMMIT`` (``git archive``) and times ``bench.scheduler_pass.measure`` at 512 waiting on
256 cores and its cold bursts (512 arriving at an idle 256-core node) under the service's
collector settings, alternating before / after in fresh processes (so both see the same machine
load), ``RUNS`` times each. Each run also hashes every assignment its passes made: equal digests
mean the two trees decided the same on those queues.
Results: ``bench/results/scheduler_pass_before_after.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "bench" / "results" / "scheduler_pass_before_after.json"

# Run in the tree under test (its own ``bench`` and ``workers``): one measure() and the cold
# bursts, every assignment kept and hashed after the timing, printed as JSON.
_MEASURE = """
import hashlib, json, sys
from workers.algorithms.tangram import ElasticScheduler
from bench.scheduler_pass import COLD_BURSTS, cold_bursts, gc_thresholds, measure
from workers.scheduler.gc_tuning import SERVICE_GC_THRESHOLDS

schedule = ElasticScheduler.schedule
passes = []  # every pass's assignments, hashed after the timing


def kept(self, now):
    out = schedule(self, now)
    passes.append(tuple(out))
    return out


def digest():
    text = repr([[(a.action_id, sorted(a.units.items()), a.core_ids) for a in p] for p in passes])
    passes.clear()
    return hashlib.sha256(text.encode()).hexdigest()


ElasticScheduler.schedule = kept
with gc_thresholds(SERVICE_GC_THRESHOLDS):
    row = measure("cpu-256", 512, int(sys.argv[1]), seed=int(sys.argv[2]))
    steady = digest()
    burst = cold_bursts("cpu-256", 512, COLD_BURSTS)
row["decisions_sha256"] = steady
row["cold_burst_p99_ms"] = burst["p99_ms"]
row["cold_burst_placed_p99_ms"] = burst["placed_p99_ms"]
row["cold_burst_decisions_sha256"] = digest()
print(json.dumps(row))
"""

KEYS = (
    "p50_ms",
    "p99_ms",
    "cpu_p50_ms",
    "cpu_p99_ms",
    "eviction_trials_p99",
    "cold_burst_p99_ms",
    "cold_burst_placed_p99_ms",
)


def _run(tree: Path, passes: int, seed: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(passes), str(seed)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    )
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def main(before: str, runs: int, passes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        old = Path(scratch)
        command = ["git", "archive", before, "bench", "workers"]
        archive = subprocess.run(command, cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        load_before = os.getloadavg()
        rows: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for seed in range(runs):
            rows["before"].append(_run(old, passes, seed))
            rows["after"].append(_run(ROOT, passes, seed))
        load_after = os.getloadavg()
    same = [
        (b["decisions_sha256"], b["cold_burst_decisions_sha256"])
        == (a["decisions_sha256"], a["cold_burst_decisions_sha256"])
        for b, a in zip(rows["before"], rows["after"], strict=True)
    ]
    summary = {
        name: {key: statistics.median(float(r[key]) for r in runs_) for key in KEYS}
        for name, runs_ in rows.items()
    }
    return {
        "benchmark": "scheduler_pass_before_after",
        "before_commit": before,
        "after": "working tree at the time of the run",
        "point": "cpu-256, 512 waiting, steady state (bench.scheduler_pass.measure), then "
        "the cold bursts of 512 at an idle 256-core node (bench.scheduler_pass.cold_bursts)",
        "passes_per_run": passes,
        "runs_each": runs,
        "seeds": list(range(runs)),
        "order": "before and after alternate, one fresh process each",
        "load_average_1_5_15_at_start": load_before,
        "load_average_1_5_15_at_end": load_after,
        "recorded_at_unix": time.time(),
        "same_decisions_per_seed": same,
        "median_over_runs": summary,
        "runs": rows,
    }


if __name__ == "__main__":
    arguments = sys.argv[1:]
    result = main(
        arguments[0] if arguments else "429e7ca",
        int(arguments[1]) if len(arguments) > 1 else 5,
        int(arguments[2]) if len(arguments) > 2 else 1000,
    )
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"same": result["same_decisions_per_seed"], **result["median_over_runs"]}))
