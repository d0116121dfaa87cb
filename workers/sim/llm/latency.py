"""The context-aware step-time model of one simulated SGLang worker (heddle §2.2, §5.2, §6).

One decode step of a worker of ``m`` tensor-parallel GPUs costs (additive roofline)

    t = o + [W + K·kv + 2·P·B + F_prefill] / (η · m · peak) + AR(m, B + chunk)

- ``W/bandwidth``: every step reads the weights once; ``K·kv/bandwidth``: it reads the KV cache of
  every running request (``K`` = the batch's context tokens), so per-token time rises with the
  batch's context, not only with its size;
- ``2·P·B/flops``: the dense matmuls of the ``B`` decoded tokens; ``F_prefill``: the FLOPs of the
  prefill chunk mixed into the step (chunked prefill, ``chunk_tokens`` per step; the chunk adds its
  attention over the context before it);
- ``AR``: two all-reduces per layer for ``m > 1`` (Megatron-LM, Shoeybi et al. 2019 §3), latency
  plus bytes over the NVLink bus bandwidth;
- ``o``, ``η``: a per-step overhead and one achieved fraction of the datasheet bandwidth and FLOPs,
  least-squares fitted (:func:`fit_efficiency`) to a published ITL-vs-concurrency table.

KV memory: SGLang's static memory fraction of the ``m`` GPUs minus the weights, in tokens.

Hardware is our assumption for heddle §7's "NVIDIA Hopper GPUs": H100 SXM 80 GB, bf16 Qwen3-14B
(the paper's ablation model, §7.2–§7.4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ModelSpec:
    """A dense decoder's sizes (from its Hugging Face ``config.json``)."""

    name: str
    parameters: float
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    weight_bytes_per_parameter: float
    kv_bytes_per_element: float

    @property
    def weight_bytes(self) -> float:
        return self.parameters * self.weight_bytes_per_parameter

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V of every layer: ``2 · layers · kv_heads · head_dim · bytes``."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes_per_element

    def prefill_flops(self, tokens: float, context_before: float) -> float:
        """Dense matmuls (2·P per token) plus attention over the context before each token
        (QKᵀ and AV: 4·hidden per layer per attended position)."""
        attention = 4.0 * self.hidden * self.layers * tokens * (context_before + tokens / 2.0)
        return 2.0 * self.parameters * tokens + attention


# huggingface.co/Qwen/Qwen3-14B config.json: 40 layers, hidden 5120, 8 KV heads of 128; model card:
# 14.8 B parameters; bf16 weights and KV cache (SGLang's default dtype for a bf16 checkpoint).
QWEN3_14B = ModelSpec("Qwen3-14B", 14.8e9, 40, 5120, 8, 128, 2.0, 2.0)
# huggingface.co/meta-llama/Llama-3.3-70B-Instruct config.json: 80 layers, hidden 8192, 8 KV heads
# of 128, 70.6 B parameters; fp8 weights as in the NIM fp8 profile the fit uses, fp8 KV cache is
# our assumption for that profile.
LLAMA33_70B_FP8 = ModelSpec("Llama-3.3-70B-fp8", 70.6e9, 80, 8192, 8, 128, 1.0, 1.0)


@dataclass(frozen=True)
class GPUSpec:
    name: str
    memory_bytes: float
    bandwidth: float  # bytes/s
    flops: float  # dense, in the model's dtype


# NVIDIA H100 SXM datasheet: 80 GB HBM3 at 3.35 TB/s; 989 TFLOPS dense bf16, 1 979 dense fp8.
H100_BF16 = GPUSpec("H100-SXM-bf16", 80e9, 3.35e12, 989e12)
H100_FP8 = GPUSpec("H100-SXM-fp8", 80e9, 3.35e12, 1979e12)


@dataclass(frozen=True)
class Interconnect:
    """Intra-node all-reduce: ``latency(m) + 2(m−1)/m · bytes / bus_bandwidth``."""

    # github.com/NVIDIA/nccl/issues/1259: small all-reduces on 2 NVLink H100s take ~6 µs (NCCL
    # 2.20, CUDA graphs); the issue reports it growing with the GPU count — growth with log2(m)
    # is our assumption.
    latency_2gpu_s: float = 6e-6
    # github.com/NVIDIA/nccl/issues/1455: ring all-reduce bus bandwidth ≈ 365–370 GB/s for 2–8
    # H100 SXM GPUs in one node.
    bus_bandwidth: float = 370e9

    def allreduce_seconds(self, mp: int, message_bytes: float) -> float:
        if mp <= 1:
            return 0.0
        latency = self.latency_2gpu_s * math.log2(mp)
        return latency + 2.0 * (mp - 1) / mp * message_bytes / self.bus_bandwidth


NVLINK_H100 = Interconnect()

# sglang python/sglang/srt/server_args.py: mem_fraction_static (weights + KV pool share of each
# GPU's memory) 0.88 at tp 1, 0.87 at tp ≥ 2, 0.85 at tp ≥ 4, 0.81 at tp ≥ 8; chunked_prefill_size
# 8192 on an 80 GB GPU.
MEM_FRACTION_STATIC: dict[int, float] = {1: 0.88, 2: 0.87, 4: 0.85, 8: 0.81}
CHUNKED_PREFILL_TOKENS = 8192


def mem_fraction_static(mp: int) -> float:
    return MEM_FRACTION_STATIC[max(d for d in MEM_FRACTION_STATIC if d <= mp)]


@dataclass(frozen=True)
class Efficiency:
    """``efficiency``: achieved share of datasheet bandwidth and FLOPs (one number for both,
    our assumption); ``step_overhead_s``: per-step time that no GPU count shortens."""

    efficiency: float
    step_overhead_s: float


@dataclass(frozen=True)
class PublishedITL:
    """A closed-loop benchmark table: ``concurrency`` clients, each sending ``input_tokens`` and
    decoding ``output_tokens``; ``itl_s`` the mean inter-token latency."""

    source: str
    model: ModelSpec
    gpu: GPUSpec
    mp: int
    input_tokens: int
    output_tokens: int
    concurrency: tuple[int, ...]
    itl_s: tuple[float, ...]


# docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance (NIM 1.8.0, Llama-3.3-70B-Instruct,
# 2 × H100 80G, fp8 TP2). Rows up to concurrency 50 only: from 100 on the ITL stays flat while the
# TTFT jumps — the server's batch is full and extra clients queue, so those rows do not measure a
# larger batch.
NIM_LLAMA33_70B_TP2_5000_500 = PublishedITL(
    "NIM 1.8.0 Llama-3.3-70B 2xH100 fp8 TP2, 5000 in / 500 out",
    LLAMA33_70B_FP8,
    H100_FP8,
    2,
    5000,
    500,
    (1, 5, 25, 50),
    (18.58e-3, 21.83e-3, 38.75e-3, 59.73e-3),
)
# Same page, 500 in / 2000 out, concurrency 1.
NIM_LLAMA33_70B_TP2_500_2000 = PublishedITL(
    "NIM 1.8.0 Llama-3.3-70B 2xH100 fp8 TP2, 500 in / 2000 out",
    LLAMA33_70B_FP8,
    H100_FP8,
    2,
    500,
    2000,
    (1,),
    (18.91e-3,),
)
PUBLISHED_ITL: tuple[PublishedITL, ...] = (
    NIM_LLAMA33_70B_TP2_5000_500,
    NIM_LLAMA33_70B_TP2_500_2000,
)


def _steady_state_terms(table: PublishedITL, link: Interconnect) -> tuple[np.ndarray, np.ndarray]:
    """Per table row: the GPU-work seconds at full datasheet speed (the part ``η`` divides) and the
    all-reduce seconds, for the steady state of a closed loop of ``c`` clients: ``c`` decoding
    with ``input + output/2`` context each, and ``c · input / output`` prefill tokens per step (each
    request's prompt is prefilled once per ``output`` decode steps)."""
    spec, gpu, mp = table.model, table.gpu, table.mp
    work, comm = [], []
    for c in table.concurrency:
        context = table.input_tokens + table.output_tokens / 2.0
        prefill_tokens = c * table.input_tokens / table.output_tokens
        memory = (spec.weight_bytes + c * context * spec.kv_bytes_per_token) / gpu.bandwidth
        flops = 2.0 * spec.parameters * c + spec.prefill_flops(prefill_tokens, 0.0)
        work.append((memory + flops / gpu.flops) / mp)
        tokens = c + prefill_tokens
        comm.append(
            2 * spec.layers * link.allreduce_seconds(mp, tokens * spec.hidden * 2.0)  # bf16 acts
        )
    return np.asarray(work), np.asarray(comm)


def fit_efficiency(
    tables: Sequence[PublishedITL] = PUBLISHED_ITL, link: Interconnect = NVLINK_H100
) -> Efficiency:
    """Least squares of ``ITL − AR = o + work / η`` over the tables' rows: linear in (o, 1/η)."""
    works, targets = [], []
    for table in tables:
        work, comm = _steady_state_terms(table, link)
        works.append(work)
        targets.append(np.asarray(table.itl_s) - comm)
    x = np.concatenate(works)
    y = np.concatenate(targets)
    basis = np.stack([np.ones_like(x), x], axis=1)
    (overhead, inverse_efficiency), *_ = np.linalg.lstsq(basis, y, rcond=None)
    if inverse_efficiency <= 1.0 or overhead < 0.0:
        raise ValueError("the fit left the physical range (η must be ≤ 1, o ≥ 0)")
    return Efficiency(efficiency=1.0 / float(inverse_efficiency), step_overhead_s=float(overhead))


def predicted_itl(
    table: PublishedITL, efficiency: Efficiency, link: Interconnect = NVLINK_H100
) -> np.ndarray:
    """The model's ITL for every row of ``table`` (to check the fit against the source)."""
    work, comm = _steady_state_terms(table, link)
    return efficiency.step_overhead_s + work / efficiency.efficiency + comm


FITTED_EFFICIENCY = fit_efficiency()


@dataclass(frozen=True)
class ContextLatencyModel:
    """Step time and KV capacity of a worker of ``mp`` GPUs serving ``model`` (module docstring).

    ``migration_*``: KV transfer for heddle §5.3 — 25 GB/s is our conservative share of the
    testbed's 400 Gb/s GPUDirect RDMA (§7), 0.1 s fixed setup (our assumption), which puts a
    10 k-token Qwen3-14B context inside heddle Table 1's 0.12–0.35 s migrations.
    """

    model: ModelSpec = QWEN3_14B
    gpu: GPUSpec = H100_BF16
    link: Interconnect = NVLINK_H100
    efficiency: Efficiency = FITTED_EFFICIENCY
    chunk_tokens: int = CHUNKED_PREFILL_TOKENS
    migration_bytes_per_s: float = 25e9
    migration_fixed_s: float = 0.1

    def _gpu_seconds(self, mp: int) -> float:
        """Seconds per unit of full-speed single-GPU work on ``mp`` GPUs at the fitted η."""
        return 1.0 / (self.efficiency.efficiency * mp)

    def base_step_seconds(self, mp: int, decode_tokens: int, prefill_tokens: float) -> float:
        """A step's time without its KV reads and prefill FLOPs: overhead, weight read, decode
        matmuls, all-reduces of every token in the step."""
        spec = self.model
        work = spec.weight_bytes / self.gpu.bandwidth + (
            2.0 * spec.parameters * decode_tokens / self.gpu.flops
        )
        tokens = decode_tokens + prefill_tokens
        comm = 2 * spec.layers * self.link.allreduce_seconds(mp, tokens * spec.hidden * 2.0)
        return self.efficiency.step_overhead_s + work * self._gpu_seconds(mp) + comm

    def kv_seconds_per_token(self, mp: int) -> float:
        """Step time added by each context token of the running batch (its KV read)."""
        return self.model.kv_bytes_per_token / self.gpu.bandwidth * self._gpu_seconds(mp)

    def prefill_seconds_per_token(self, mp: int, tokens: float, context_before: float) -> float:
        """GPU seconds per prefilled token of a ``tokens``-long prefill after ``context_before``
        cached tokens (mixed into decode steps by chunked prefill)."""
        if tokens <= 0:
            return 0.0
        flops = self.model.prefill_flops(tokens, context_before) / tokens
        return flops / self.gpu.flops * self._gpu_seconds(mp)

    def step_seconds(
        self, mp: int, decode_tokens: int, kv_tokens: float, prefill_tokens: float = 0.0
    ) -> float:
        """One step: ``decode_tokens`` running requests holding ``kv_tokens`` of context, plus a
        prefill chunk of ``prefill_tokens`` (no cached context before it)."""
        return (
            self.base_step_seconds(mp, decode_tokens, prefill_tokens)
            + kv_tokens * self.kv_seconds_per_token(mp)
            + prefill_tokens * self.prefill_seconds_per_token(mp, prefill_tokens, 0.0)
        )

    def kv_capacity_tokens(self, mp: int) -> float:
        """KV pool of an ``mp``-GPU worker: SGLang's static share of its memory, less weights."""
        pool = mp * self.gpu.memory_bytes * mem_fraction_static(mp) - self.model.weight_bytes
        if pool <= 0:
            raise ValueError(f"{self.model.name} does not fit on {mp} × {self.gpu.name}")
        return pool / self.model.kv_bytes_per_token

    def migration_seconds(self, tokens: float) -> float:
        return self.migration_fixed_s + max(tokens, 0.0) * self.model.kv_bytes_per_token / (
            self.migration_bytes_per_s
        )
