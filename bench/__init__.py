"""Loom's benchmarks: ``python -m bench NAME [--quick]`` writes ``bench/results/NAME.json``.

Every benchmark is a module ``bench/<name>.py`` exposing ``run(quick: bool) -> BenchReport``.
Targets are ratios against a baseline measured in the same run (DESIGN.md "Performance").
"""
