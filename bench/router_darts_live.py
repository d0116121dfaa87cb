"""DARTS group rollouts through the live router on the CPU engine, against standard sampling.

Processes as in production: two llama.cpp workers (``python -m workers.engine --backend
llamacpp``, each ``slots`` sequences decoded at once) serving the project's own tiny model
(seeded random weights, GGUF), one router in front of them (``python -m workers.router --open``,
Heddle policy), and this client. Every configuration goes through the same endpoint,
``POST /v1/loom/groups``, on the same prompts with the same seeds — so standard's ``M`` samples
of a prompt are the first ``M`` of DARTS's candidates (``groups.SEED_STRIDE``): a paired
comparison.

- ``standard``: ``budget.policy = standard`` — ``M`` samples per prompt, all kept (GRPO as
  verl runs it: the whole generation batch to the engines at once, the step waits for all).
- ``darts``: ``adaptive`` — Eq. 9's budget with λ calibrated on the job's first group to
  ``1.5·N·M`` (App. B), Alg. 1 allocation from the per-prompt variance history the router keeps,
  dual-end selection, tail pruning with early stop (aborts on the engines), kept samples
  streamed as soon as settled (§4.3.2).
- ``darts_batch_end``: the same group with ``stream: false`` — every sample delivered at once at
  the end, the delivery the streamed run is compared with.

One warm-up DARTS step first (it fills the variance history and calibrates λ; not measured), then
``repeats`` steps, each running the three configurations in an order that rotates per step (the
shared machine's drift falls on each alike). The model is untrained noise: its lengths come from
where its random logits put the end-of-sequence token, long-tailed and prompt-dependent, and
no training follows, so nothing here shows DARTS's effect on the *next* steps' lengths
(darts §5, Fig. 14), only one step's rollout.

What can make DARTS's group slower here: its pools contain standard's samples (same seeds), so
a dual-end prompt can only end later than under standard sampling — it waits for its whole pool
(§4.1.2); a step gets shorter only where tail pruning's early stop (§4.3.1) cuts the prompts that
hold the step's tail, and Alg. 1 saturates (prunes) only the highest-variance prompts. And on a
CPU engine the extra candidates are not free: every sequence decodes on the same few cores, so
per-token latency grows with the candidates in flight, where a GPU's memory-bound decode batches
them at little extra cost (the regime the paper measures, App. A).

Targets, fixed before the first measurement:

- ``darts_rollout_speedup_vs_standard`` = median over steps of standard's group time / DARTS's,
  ``>= 1.0``: the group of ``M`` kept samples per prompt no later than standard sampling's.
- ``first_kept_streamed_vs_batch_end`` = median over steps of the batch-end answer's time /
  the streamed run's first kept sample, ``>= 2``: streaming hands the trainer its first sample
  in at most half the time batch-end delivery takes.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.report import BenchReport, Target
from bench.router_overhead import _start
from workers.engine.tiny_model import TinyModelShape, tiny_model

NAME = "router_darts_live"
# Small enough to decode thousands of tokens a second on two shared cores.
SHAPE = TinyModelShape(embedding=64, layers=2, heads=2, feed_forward=128, context=2048)
CONFIGURATIONS = ("standard", "darts", "darts_batch_end")
_SUBJECTS = ("the failing test", "a parser", "the import", "the file", "a list", "the code")
_VERBS = ("fix", "write", "test", "run", "return", "assert", "import", "pass")


@dataclass(frozen=True)
class Settings:
    prompts: int
    group_size: int
    max_tokens: int
    repeats: int
    workers: int = 2
    slots: int = 8
    temperature: float = 1.0


def prompt_texts(count: int) -> list[str]:
    """Deterministic, distinct prompts: each keeps its id (and so its history) across steps."""
    return [
        f"{_VERBS[i % len(_VERBS)]} {_SUBJECTS[i % len(_SUBJECTS)]} in task {i}"
        for i in range(count)
    ]


def _body(settings: Settings, policy: str, seed: int, stream: bool) -> dict[str, Any]:
    return {
        "model": SHAPE.name,
        "prompts": [
            {"id": f"p{i}", "prompt": t} for i, t in enumerate(prompt_texts(settings.prompts))
        ],
        "group_size": settings.group_size,
        "budget": {"policy": policy},
        "sampling": {
            "max_tokens": settings.max_tokens,
            "temperature": settings.temperature,
            "seed": seed,
        },
        "stream": stream,
    }


async def streamed_group(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    """Client-side times of the first kept sample and of the group's end, and its statistics."""
    started = time.perf_counter()
    first_kept: float | None = None
    kept_at: list[float] = []
    stats: dict[str, Any] = {}
    async with http.stream("POST", "/v1/loom/groups", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"group refused: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if event["type"] == "sample.kept":
                now = time.perf_counter() - started
                first_kept = now if first_kept is None else first_kept
                kept_at.append(now)
            elif event["type"] == "group.complete":
                stats = event["statistics"]
            elif event["type"] == "group.error":
                raise RuntimeError(f"group failed: {event['error']}")
    return {
        "seconds": time.perf_counter() - started,
        "first_kept_s": first_kept,
        "median_kept_s": statistics.median(kept_at) if kept_at else None,
        "statistics": stats,
    }


async def whole_group(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    response = await http.post("/v1/loom/groups", json=body)
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"group refused: {response.text[:300]}")
    return {
        "seconds": seconds,
        "first_kept_s": seconds,
        "statistics": response.json()["statistics"],
    }


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    stats = result["statistics"]
    kept = [s["tokens"] for row in stats["samples"] for s in row if s["fate"] == "kept"]
    return {
        "seconds": round(result["seconds"], 4),
        "first_kept_s": None
        if result["first_kept_s"] is None
        else round(result["first_kept_s"], 4),
        "median_kept_s": None
        if result.get("median_kept_s") is None
        else round(result["median_kept_s"], 4),
        "router_seconds": stats["seconds"],
        "total_budget": stats["total_budget"],
        "allocations": stats["allocations"],
        "pruned_prompts": len(stats["pruned_prompts"]),
        "aborted": stats["aborted"],
        "generated_tokens": stats["generated_tokens"],
        "kept_tokens": stats["kept_tokens"],
        "kept_mean_length": round(statistics.fmean(kept), 2) if kept else 0.0,
        "kept_max_length": max(kept, default=0),
        # per prompt, per candidate: [tokens, fate] (fate None: the group failed before it)
        "candidates": [[[s["tokens"], s["fate"]] for s in row] for row in stats["samples"]],
    }


def paired_lengths_equal(standard: dict[str, Any], darts: dict[str, Any]) -> float:
    """Share of standard's samples whose length equals DARTS's candidate of the same prompt and
    slot where that one finished (same seed: the pairing the comparison relies on)."""
    same = compared = 0
    for mine, theirs in zip(standard["candidates"], darts["candidates"], strict=True):
        for (length, _), (other, fate) in zip(mine, theirs, strict=False):
            if fate in ("kept", "dropped"):
                compared += 1
                same += length == other
    return same / compared if compared else 0.0


async def measure(settings: Settings, router_url: str) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGURATIONS}
    timeout = httpx.Timeout(600.0)
    async with httpx.AsyncClient(base_url=router_url, timeout=timeout) as http:
        warm = await streamed_group(http, _body(settings, "adaptive", seed=1, stream=True))
        for step in range(settings.repeats):
            seed = 1_000_003 * (step + 2)
            order = CONFIGURATIONS[step % 3 :] + CONFIGURATIONS[: step % 3]
            for name in order:
                if name == "standard":
                    result = await streamed_group(http, _body(settings, "standard", seed, True))
                elif name == "darts":
                    result = await streamed_group(http, _body(settings, "adaptive", seed, True))
                else:
                    result = await whole_group(http, _body(settings, "adaptive", seed, False))
                runs[name].append({"step": step, "order": order.index(name), **_summary(result)})
    return {"warm_up": _summary(warm), "runs": runs}


def ratios(series: dict[str, Any]) -> dict[str, list[float]]:
    runs = series["runs"]
    pairs = zip(runs["standard"], runs["darts"], runs["darts_batch_end"], strict=True)
    values: dict[str, list[float]] = {
        "darts_rollout_speedup_vs_standard": [],
        "first_kept_streamed_vs_batch_end": [],
        "darts_group_end_vs_its_first_kept": [],
        "standard_group_end_vs_its_first_kept": [],
        "darts_generated_tokens_vs_standard": [],
        "darts_kept_mean_length_vs_standard": [],
        "paired_lengths_equal": [],
    }
    for standard, darts, batch_end in pairs:
        values["darts_rollout_speedup_vs_standard"].append(standard["seconds"] / darts["seconds"])
        values["first_kept_streamed_vs_batch_end"].append(
            batch_end["seconds"] / darts["first_kept_s"]
        )
        values["darts_group_end_vs_its_first_kept"].append(darts["seconds"] / darts["first_kept_s"])
        values["standard_group_end_vs_its_first_kept"].append(
            standard["seconds"] / standard["first_kept_s"]
        )
        values["darts_generated_tokens_vs_standard"].append(
            darts["generated_tokens"] / standard["generated_tokens"]
        )
        values["darts_kept_mean_length_vs_standard"].append(
            darts["kept_mean_length"] / standard["kept_mean_length"]
        )
        values["paired_lengths_equal"].append(paired_lengths_equal(standard, darts))
    return values


def start_fleet(settings: Settings, model: Path) -> tuple[list[Any], str]:
    processes = []
    try:
        urls = []
        for _ in range(settings.workers):
            process, url = _start([
                "workers.engine", "--backend", "llamacpp", "--model", str(model),
                "--model-name", SHAPE.name, "--slots", str(settings.slots),
                "--context", str(SHAPE.context), "--port", "0",
            ])  # fmt: skip
            processes.append(process)
            urls.append(url)
        workers = [arg for url in urls for arg in ("--worker", url)]
        router, router_url = _start([
            "workers.router", "--open", "--port", "0", "--policy", "heddle",
            "--batch-limit", str(settings.slots), *workers,
        ])  # fmt: skip
        processes.append(router)
        return processes, router_url
    except BaseException:
        for process in processes:
            process.kill()
        raise


def measure_fleet(settings: Settings) -> dict[str, Any]:
    """Start the workers and the router, measure, stop them; the series with its ratios."""
    with tempfile.TemporaryDirectory(prefix="loom-darts-live-") as directory:
        model = tiny_model(Path(directory), SHAPE)
        processes, router_url = start_fleet(settings, model)
        try:
            series = asyncio.run(measure(settings, router_url))
        finally:
            for process in processes:
                process.kill()
                process.wait()
    series["ratios"] = ratios(series)
    series["median_ratios"] = {
        name: statistics.median(values) for name, values in series["ratios"].items()
    }
    return series


def run(quick: bool) -> BenchReport:
    settings = (
        Settings(prompts=4, group_size=4, max_tokens=384, repeats=3)
        if quick
        else Settings(prompts=8, group_size=8, max_tokens=1024, repeats=5)
    )
    report = BenchReport(benchmark=NAME, quick=quick, params={
        **settings.__dict__, "model": SHAPE.name, "budget_target_multiple": 1.5,
        "engine": "llama.cpp (llama-cpp-python), one process per worker",
        "router": "python -m workers.router --open, heddle",
    })  # fmt: skip
    report.params["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
    series = report.series = measure_fleet(settings)
    report.params["load_average_after"] = [round(x, 2) for x in os.getloadavg()]  # shared cores
    medians = series["median_ratios"]
    report.targets = [
        Target.at_least(
            "darts_rollout_speedup_vs_standard", medians["darts_rollout_speedup_vs_standard"], 1.0
        ),
        Target.at_least(
            "first_kept_streamed_vs_batch_end", medians["first_kept_streamed_vs_batch_end"], 2.0
        ),
    ]
    return report
