"""Where a benchmark's results go: a quick run beside the full one, never over it."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report import BenchReport, Target


def test_a_quick_run_writes_beside_the_full_run(tmp_path: Path) -> None:
    full = BenchReport(benchmark="demo_bench", quick=False, targets=[Target.at_least("x", 2, 1)])
    quick = BenchReport(benchmark="demo_bench", quick=True, targets=[Target.at_least("x", 0, 1)])
    assert full.write(tmp_path).name == "demo_bench.json"
    assert quick.write(tmp_path).name == "demo_bench_quick.json"
    assert json.loads((tmp_path / "demo_bench.json").read_text())["targets"][0]["met"] is True
