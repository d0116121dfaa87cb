"""A small GPT (a few million parameters at the lab's size) with a KV cache for CPU sampling."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    context: int
    width: int = 80
    layers: int = 3
    heads: int = 4


KVCache = list[tuple[torch.Tensor, torch.Tensor]]


class _Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.norm1 = nn.LayerNorm(config.width)
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)
        self.norm2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(
            nn.Linear(config.width, 4 * config.width),
            nn.GELU(),
            nn.Linear(4 * config.width, config.width),
        )

    def forward(
        self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        # A cached decode step has one query attending to every earlier key: no mask needed.
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None and length > 1)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        x = x + self.mlp(self.norm2(x))
        return x, (k, v)


class TinyCausalLM(nn.Module):
    """Pre-norm transformer decoder; ``forward`` for training, ``step`` for cached sampling."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.width)
        self.position_embedding = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Embedding):
            # Unit-scale embeddings: positions are distinguishable from the first step, which
            # shortens the plateau before attention locks onto the operand positions.
            nn.init.normal_(module.weight, std=1.0)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits for every position of ``tokens`` (batch × length)."""
        logits, _ = self.step(tokens, None, start=0)
        return logits

    def step(
        self, tokens: torch.Tensor, cache: KVCache | None, start: int
    ) -> tuple[torch.Tensor, KVCache]:
        """Run ``tokens`` placed at positions ``start …``; returns logits and the extended cache."""
        length = tokens.shape[1]
        if start + length > self.config.context:
            raise ValueError(f"sequence of {start + length} exceeds context {self.config.context}")
        positions = torch.arange(start, start + length)
        x = self.token_embedding(tokens) + self.position_embedding(positions)[None]
        new_cache: KVCache = []
        for index, block in enumerate(self.blocks):
            x, kv = block(x, None if cache is None else cache[index])
            new_cache.append(kv)
        return self.head(self.norm(x)), new_cache


def select_rows(cache: KVCache, rows: torch.Tensor) -> KVCache:
    """Keep only ``rows`` of every cached tensor (drop finished and aborted sequences)."""
    return [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in cache]
