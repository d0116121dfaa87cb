"""Small HF-format checkpoints the project makes itself (no weights can be downloaded here).

``create_checkpoint`` writes a Llama-architecture model with seeded random weights as
``config.json`` + ``model.safetensors`` — the layout every Hugging Face reward model and teacher
ships in — so the PyTorch backend loads tests', the demo's and the benchmark's services through
exactly the code path a real checkpoint takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

Task = Literal["reward", "logprobs"]


def create_checkpoint(
    path: str | Path,
    task: Task,
    *,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    vocab_size: int = 512,
    max_positions: int = 512,
    seed: int = 0,
) -> Path:
    """Write a random-weight Llama reward model (``reward``: one score per sequence) or causal LM
    (``logprobs``: a teacher's per-token log-probabilities) to ``path``; returns ``path``."""
    if hidden_size % heads:
        raise ValueError(f"hidden_size: {hidden_size} is not a multiple of heads ({heads})")
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    config.num_labels = 1  # a reward model's single score
    torch.manual_seed(seed)
    model: torch.nn.Module
    if task == "reward":
        model = LlamaForSequenceClassification(config)
    elif task == "logprobs":
        model = LlamaForCausalLM(config)
    else:
        raise ValueError(f"task: {task!r} is not 'reward' or 'logprobs'")
    out = Path(path)
    model.save_pretrained(out)
    return out
