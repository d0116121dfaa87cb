"""``python -m bench NAME [--quick]`` and ``python -m bench all --quick``."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
from pathlib import Path

from bench.report import BenchReport

_NOT_BENCHMARKS = {"report", "__main__"}


def available() -> list[str]:
    here = Path(__file__).resolve().parent
    names = [m.name for m in pkgutil.iter_modules([str(here)]) if not m.ispkg]
    return sorted(n for n in names if n not in _NOT_BENCHMARKS and not n.startswith("_"))


def run_one(name: str, quick: bool) -> BenchReport:
    module = importlib.import_module(f"bench.{name}")
    started = time.perf_counter()
    report: BenchReport = module.run(quick=quick)
    path = report.write()
    elapsed = time.perf_counter() - started
    print(f"[{name}] wrote {path} in {elapsed:.1f} s")
    for target in report.targets:
        mark = "ok " if target.met else "MISS"
        print(f"  {mark} {target.name}: {target.value:.4g} (target {target.target})")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("name", help=f"one of: all, {', '.join(available())}")
    parser.add_argument("--quick", action="store_true", help="small sizes, under 60 s each")
    args = parser.parse_args(argv)
    names = available() if args.name == "all" else [args.name]
    unknown = [n for n in names if n not in available()]
    if unknown:
        parser.error(
            f"unknown benchmark {unknown[0]!r}; choose from: all, {', '.join(available())}"
        )
    reports = [run_one(name, args.quick) for name in names]
    missed = [t.name for r in reports for t in r.targets if not t.met]
    if missed:
        print(f"targets not met: {', '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
