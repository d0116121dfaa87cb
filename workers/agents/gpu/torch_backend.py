"""The PyTorch backend: a Hugging Face module from a local checkpoint, served from the cache.

Two registered tasks: ``reward`` (a sequence-classification reward model: one score per token
sequence) and ``logprobs`` (a causal LM used as a teacher: per-token log-probabilities, as
on-policy distillation asks for). The checkpoint is a local HF-format directory (``config.json``
plus safetensors weights); nothing is downloaded.

EOE for a plain module (arl-tangram §5.3): ``prepare`` loads the model once into host memory
(pinned when CUDA is present, so restores are DMA copies); ``restore`` builds an empty replica on
each device of the chunk and copies every parameter, buffer and tensor attribute into it from the
host copy; ``evict`` drops the replicas. A plain module has no tensor parallelism, so a chunk of
``n`` devices holds ``n`` replicas and a request's sequences are split across them (data
parallel): each device holds the whole model. SGLang (``sglang_backend``) is the backend that
shards a model across a chunk. On a machine without CUDA the devices are CPU stand-ins and the
same code runs.

A restore does only what a GPU restore does: copy the weights. The module's structure (built on
the meta device) is made once and kept with the service between restores; on a stand-in the
weights go into one block of the device's memory that an earlier eviction left for reuse
(``standin.BlockPool``, as CUDA's caching allocator reuses freed blocks).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

from workers.agents.gpu.backend import Chunk, ServiceBackend, ServiceError
from workers.agents.gpu.checkpoints import Task
from workers.agents.gpu.devices import Device, cuda_present
from workers.agents.gpu.standin import STANDIN_BLOCKS

_MODEL_CLASSES: dict[str, Any] = {
    "reward": AutoModelForSequenceClassification,
    "logprobs": AutoModelForCausalLM,
}


def _tensor_attributes(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Plain tensor attributes (not parameters or buffers), e.g. a rotary embedding's copy of
    its frequencies: a replica built on the meta device needs them too."""
    return {name: value for name, value in vars(module).items() if isinstance(value, torch.Tensor)}


_ALIGN = 64  # bytes: every tensor in a stand-in block starts aligned for any dtype


def _slots(host: torch.nn.Module) -> Iterator[tuple[str, str, torch.Tensor]]:
    """Every (module name, "param"/"buffer" + name, tensor) a replica holds, in one fixed order."""
    for module_name, module in host.named_modules():
        for name, tensor in module.named_parameters(recurse=False):
            yield module_name, "p" + name, tensor
        for name, tensor in module.named_buffers(recurse=False):
            yield module_name, "b" + name, tensor


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


def _block_bytes(host: torch.nn.Module) -> int:
    return sum(_aligned(t.numel() * t.element_size()) for _, _, t in _slots(host))


class TorchService(ServiceBackend):
    """A reward model or teacher from ``checkpoint`` (an HF-format directory)."""

    kind = "torch"

    def __init__(
        self,
        name: str,
        checkpoint: str | Path,
        task: Task,
        *,
        max_sequences: int = 256,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(name)
        if task not in _MODEL_CLASSES:
            raise ValueError(f"task: {task!r} is not one of {sorted(_MODEL_CLASSES)}")
        self.checkpoint = Path(checkpoint)
        if not (self.checkpoint / "config.json").is_file():
            raise ValueError(f"checkpoint: {self.checkpoint} has no config.json")
        self.task = task
        self.max_sequences = max_sequences
        self.dtype = dtype
        self.config = AutoConfig.from_pretrained(self.checkpoint)
        self.max_tokens = int(getattr(self.config, "max_position_embeddings", 2048))
        self.vocab_size = int(self.config.vocab_size)
        self.host: torch.nn.Module | None = None
        self.host_mb = 0.0
        self.replicas: dict[tuple[int, int], list[torch.nn.Module]] = {}
        self._blocks: dict[tuple[int, int], list[tuple[Device, torch.Tensor]]] = {}
        self._skeletons: list[torch.nn.Module] = []  # meta-device structures, kept for reuse
        self._block_bytes = 0

    # --- host copy ------------------------------------------------------------------------

    async def prepare(self) -> None:
        if self.host is None:
            self.host = await asyncio.to_thread(self._load_host)

    def _load_host(self) -> torch.nn.Module:
        model = _MODEL_CLASSES[self.task].from_pretrained(self.checkpoint, dtype=self.dtype)
        model.eval()
        if cuda_present():  # pinned host pages: restores become asynchronous DMA copies
            for tensor in [*model.parameters(), *model.buffers()]:
                tensor.data = tensor.data.pin_memory()
        self.host_mb = sum(
            t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()]
        ) / (1024 * 1024)
        self._block_bytes = _block_bytes(model)
        return model

    def device_mb(self, chunk_size: int) -> float:
        """A whole replica on every device of the chunk (data parallel, see the module doc)."""
        if self.host is None:
            raise RuntimeError(f"service {self.name!r} is not prepared")
        return self.host_mb

    # --- restore / evict ------------------------------------------------------------------

    async def restore(self, chunk: Chunk) -> None:
        replicas = await asyncio.to_thread(lambda: [self._replica(d) for d in chunk.devices])
        self.replicas[chunk.key] = [replica for replica, _ in replicas]
        self._blocks[chunk.key] = [
            (device, block)
            for device, (_, block) in zip(chunk.devices, replicas, strict=True)
            if block is not None
        ]

    def _skeleton(self) -> torch.nn.Module:
        """The module's structure on the meta device: an evicted replica's, or a new one."""
        if self._skeletons:
            return self._skeletons.pop()
        with torch.device("meta"):
            return _MODEL_CLASSES[self.task].from_config(self.config, dtype=self.dtype)

    def _replica(self, device: Device) -> tuple[torch.nn.Module, torch.Tensor | None]:
        host = self.host
        if host is None:
            raise RuntimeError(f"service {self.name!r} is not prepared")
        replica = self._skeleton()
        block = None
        with torch.no_grad():
            if device.is_cuda:
                replica = replica.to_empty(device=device.torch_device)
                for (_, source), (_, target) in self._pairs(host, replica):
                    for name, tensor in source.named_parameters(recurse=False):
                        getattr(target, name).copy_(tensor, non_blocking=True)
                    for name, buffer in source.named_buffers(recurse=False):
                        getattr(target, name).copy_(buffer, non_blocking=True)
            else:
                block = STANDIN_BLOCKS.take(device, self._block_bytes)
                self._place(host, replica, block)
            for (_, source), (_, target) in self._pairs(host, replica):
                for name, value in _tensor_attributes(source).items():
                    setattr(target, name, value.to(device.torch_device))
        if device.is_cuda:
            torch.cuda.synchronize(device.torch_device)
        replica.eval()
        return replica, block

    @staticmethod
    def _pairs(
        host: torch.nn.Module, replica: torch.nn.Module
    ) -> Iterator[tuple[tuple[str, torch.nn.Module], tuple[str, torch.nn.Module]]]:
        return zip(host.named_modules(), replica.named_modules(), strict=True)

    @staticmethod
    def _place(host: torch.nn.Module, replica: torch.nn.Module, block: torch.Tensor) -> None:
        """Copy every parameter and buffer into ``block`` and point the replica's at the copies."""
        modules = dict(replica.named_modules())
        offset = 0
        for module_name, slot, tensor in _slots(host):
            nbytes = tensor.numel() * tensor.element_size()
            view = block[offset : offset + nbytes].view(tensor.dtype).view(tensor.shape)
            view.copy_(tensor)
            offset += _aligned(nbytes)
            target = modules[module_name]
            if slot[0] == "p":
                target._parameters[slot[1:]] = torch.nn.Parameter(view, requires_grad=False)
            else:
                target._buffers[slot[1:]] = view

    async def evict(self, chunk: Chunk) -> None:
        replicas = self.replicas.pop(chunk.key, None) or []
        for device, block in self._blocks.pop(chunk.key, []):
            STANDIN_BLOCKS.give(device, block)
        for replica in replicas:  # keep the structure, let go of the device's memory
            self._skeletons.append(replica.to("meta"))
        if chunk.devices[0].is_cuda:
            torch.cuda.empty_cache()

    # --- requests -------------------------------------------------------------------------

    def _sequences(self, request: Mapping[str, Any]) -> list[list[int]]:
        raw = request.get("input_ids")
        if not isinstance(raw, list) or not raw:
            raise ServiceError("input_ids: a non-empty list of token-id lists is required")
        if len(raw) > self.max_sequences:
            raise ServiceError(f"input_ids: {len(raw)} sequences, at most {self.max_sequences}")
        sequences = []
        for index, sequence in enumerate(raw):
            if (
                not isinstance(sequence, list)
                or not sequence
                or not all(isinstance(t, int) and 0 <= t < self.vocab_size for t in sequence)
            ):
                raise ServiceError(
                    f"input_ids[{index}]: a non-empty list of token ids in [0, {self.vocab_size})"
                )
            if len(sequence) > self.max_tokens:
                raise ServiceError(
                    f"input_ids[{index}]: {len(sequence)} tokens, at most {self.max_tokens}"
                )
            sequences.append(sequence)
        return sequences

    async def execute(
        self, chunk: Chunk, request: Mapping[str, Any], priority: int
    ) -> dict[str, Any]:
        """Score (``reward``) or log-prob (``logprobs``) every sequence; priority is moot here:
        the chunk runs one request at a time (§5.3)."""
        sequences = self._sequences(request)
        replicas = self.replicas.get(chunk.key)
        if replicas is None:
            raise RuntimeError(f"service {self.name!r} is not resident on chunk {chunk.key}")
        shards = [sequences[i :: len(replicas)] for i in range(len(replicas))]
        parts = await asyncio.gather(
            *(
                asyncio.to_thread(self._run, replica, shard)
                for replica, shard in zip(replicas, shards, strict=True)
                if shard
            )
        )
        values: list[Any] = [None] * len(sequences)
        for offset, part in enumerate(parts):
            values[offset :: len(replicas)] = part
        field = "scores" if self.task == "reward" else "logprobs"
        return {field: values}

    def _run(self, replica: torch.nn.Module, sequences: list[list[int]]) -> list[Any]:
        device = next(replica.parameters()).device
        out: list[Any] = []
        with torch.inference_mode():
            for sequence in sequences:  # one at a time: no padding semantics to get wrong
                ids = torch.tensor([sequence], device=device)
                logits = replica(input_ids=ids).logits.float()
                if self.task == "reward":
                    out.append(float(logits[0, 0]))
                    continue
                logp = torch.log_softmax(logits[0, :-1], dim=-1)
                picked = logp.gather(1, ids[0, 1:].unsqueeze(1)).squeeze(1)
                out.append([round(float(v), 6) for v in picked.cpu()])
        return out

    async def close(self) -> None:
        for blocks in self._blocks.values():
            for device, block in blocks:
                STANDIN_BLOCKS.give(device, block)
        self.replicas.clear()
        self._blocks.clear()
        self._skeletons.clear()
        self.host = None
