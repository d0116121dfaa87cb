"""The SGLang backend: one server per (service, chunk), EOE through memory release and resume.

arl-tangram §5.3 on a real GPU node: the first restore of a service onto a chunk launches an
SGLang server there (``CUDA_VISIBLE_DEVICES`` = the chunk's GPUs, tensor parallelism = the chunk
size, ``--enable-memory-saver`` with a CPU backup of the weights so nothing is re-read from
disk); eviction is ``POST /release_memory_occupation`` (the server keeps running, its GPU memory is
freed, the weights stay in host memory) and every later restore is
``POST /resume_memory_occupation``. Requests are forwarded with their priority (the server runs
with ``--enable-priority-scheduling``): a reward model through ``/classify`` (launched with
``--is-embedding``), a teacher's per-token log-probabilities through ``/generate`` with
``return_logprob`` and no new tokens.

Needs CUDA and the ``sglang`` package (``requirements/gpu.txt``); ``prepare`` says which is
missing, so an agent configured with this backend on a machine without them fails at start-up
with the reason, not at the first request.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from workers.agents.gpu.backend import Chunk, ServiceBackend, ServiceError
from workers.agents.gpu.checkpoints import Task
from workers.agents.gpu.devices import cuda_present


class SglangUnavailable(RuntimeError):
    """This machine cannot run SGLang (no CUDA, no ``sglang`` package): the reason is the text."""


def sglang_missing() -> str | None:
    """Why SGLang cannot run here, or None when it can."""
    if not cuda_present():
        return "no CUDA device on this machine"
    if importlib.util.find_spec("sglang") is None:
        return "the sglang package is not installed (requirements/gpu.txt)"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_command(
    *,
    model_path: str | Path,
    task: Task,
    chunk: Chunk,
    port: int,
    mem_fraction: float,
    python: str = sys.executable,
    extra_args: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of the server for ``chunk`` (TP = chunk size)."""
    command = [
        python, "-m", "sglang.launch_server",
        "--model-path", str(model_path),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--tp-size", str(chunk.size),
        "--mem-fraction-static", f"{mem_fraction:.3f}",
        "--enable-memory-saver",
        "--enable-weights-cpu-backup",
        "--enable-priority-scheduling",
        "--schedule-policy", "fcfs",
        "--skip-server-warmup",
    ]  # fmt: skip
    if task == "reward":
        command.append("--is-embedding")
    command += list(extra_args)
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": ",".join(str(device.index) for device in chunk.devices),
    }
    return command, env


def request_body(
    task: Task, sequences: list[list[int]], priority: int
) -> tuple[str, dict[str, Any]]:
    """The endpoint and JSON body for one request of ``task``."""
    if task == "reward":
        return "/classify", {"input_ids": sequences, "priority": priority}
    return "/generate", {
        "input_ids": sequences,
        "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
        "return_logprob": True,
        "logprob_start_len": 0,
        "priority": priority,
    }


def parse_response(task: Task, body: Any) -> dict[str, Any]:
    """Scores from ``/classify`` (one per sequence) or log-probs from ``/generate`` (the first
    token has none: it is dropped, as in the PyTorch backend)."""
    items = body if isinstance(body, list) else [body]
    if task == "reward":
        return {"scores": [float(item["embedding"][0]) for item in items]}
    return {
        "logprobs": [
            [float(entry[0]) for entry in item["meta_info"]["input_token_logprobs"][1:]]
            for item in items
        ]
    }


class SglangService(ServiceBackend):
    """A model served by SGLang; ``footprint_mb`` is its total GPU memory (weights + KV) per
    instance, shared out over a chunk by tensor parallelism."""

    kind = "sglang"

    def __init__(
        self,
        name: str,
        model_path: str | Path,
        task: Task,
        *,
        footprint_mb: float,
        device_memory_mb: float,
        sizes: tuple[int, ...] = (1, 2, 4, 8),
        startup_timeout_s: float = 600.0,
        request_timeout_s: float = 300.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        super().__init__(name)
        if footprint_mb <= 0 or device_memory_mb <= 0:
            raise ValueError("footprint_mb and device_memory_mb must be > 0")
        self.model_path = Path(model_path)
        self.task = task
        self.footprint_mb = footprint_mb
        self.device_memory_mb = device_memory_mb
        self.sizes = sizes
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = tuple(extra_args)
        self.client = httpx.AsyncClient(timeout=request_timeout_s, trust_env=False)
        self.servers: dict[tuple[int, int], tuple[asyncio.subprocess.Process, str]] = {}

    def chunk_sizes(self) -> tuple[int, ...]:
        return self.sizes

    def device_mb(self, chunk_size: int) -> float:
        return self.footprint_mb / chunk_size

    async def prepare(self) -> None:
        reason = sglang_missing()
        if reason is not None:
            raise SglangUnavailable(f"service {self.name!r}: {reason}")
        if not (self.model_path / "config.json").is_file():
            raise ValueError(f"model_path: {self.model_path} has no config.json")

    async def restore(self, chunk: Chunk) -> None:
        server = self.servers.get(chunk.key)
        if server is None:
            await self._launch(chunk)
            return
        await self._post(server[1], "/resume_memory_occupation", {})

    async def evict(self, chunk: Chunk) -> None:
        server = self.servers.get(chunk.key)
        if server is not None:
            await self._post(server[1], "/release_memory_occupation", {})

    async def execute(
        self, chunk: Chunk, request: Mapping[str, Any], priority: int
    ) -> dict[str, Any]:
        server = self.servers.get(chunk.key)
        if server is None:
            raise RuntimeError(f"service {self.name!r} has no server on chunk {chunk.key}")
        raw = request.get("input_ids")
        if (
            not isinstance(raw, list)
            or not raw
            or not all(
                isinstance(s, list) and s and all(isinstance(t, int) for t in s) for s in raw
            )
        ):
            raise ServiceError("input_ids: a non-empty list of non-empty token-id lists")
        path, body = request_body(self.task, raw, priority)
        response = await self.client.post(server[1] + path, json=body)
        if response.status_code == 400:
            raise ServiceError(f"input_ids: the server refused the request: {response.text}")
        response.raise_for_status()
        return parse_response(self.task, response.json())

    async def _post(self, base: str, path: str, body: dict[str, Any]) -> None:
        response = await self.client.post(base + path, json=body)
        response.raise_for_status()

    async def _launch(self, chunk: Chunk) -> None:
        port = free_port()
        fraction = min(0.95, self.device_mb(chunk.size) / self.device_memory_mb)
        command, env = launch_command(
            model_path=self.model_path,
            task=self.task,
            chunk=chunk,
            port=port,
            mem_fraction=fraction,
            extra_args=self.extra_args,
        )
        process = await asyncio.create_subprocess_exec(
            *command, env=env, start_new_session=True,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        self.servers[chunk.key] = (process, base)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if process.returncode is not None:
                del self.servers[chunk.key]
                raise RuntimeError(
                    f"the SGLang server of {self.name!r} on chunk {chunk.key} exited with"
                    f" {process.returncode} while starting"
                )
            try:
                if (await self.client.get(base + "/health", timeout=5.0)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(1.0)
        await self._stop(process)
        del self.servers[chunk.key]
        raise TimeoutError(f"the SGLang server of {self.name!r} did not start in time")

    async def _stop(self, process: asyncio.subprocess.Process) -> None:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGTERM)  # its own session: the TP workers too
            try:
                await asyncio.wait_for(process.wait(), 30.0)
            except TimeoutError:
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()

    async def close(self) -> None:
        for process, _ in list(self.servers.values()):
            await self._stop(process)
        self.servers.clear()
        await self.client.aclose()
