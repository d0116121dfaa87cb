"""A small causal LM the project creates itself, in GGUF, for the CPU engine (llama.cpp).

No weights can be downloaded on Loom's machines, so ``make demo`` and the tests serve a model
written here: a Llama-architecture decoder with random weights (a seeded generator, so every
machine writes the same file) and a SentencePiece-style vocabulary of the 256 byte tokens plus a
few word pieces, so any text tokenizes (byte fallback) and generation emits real tokens at the
speed llama.cpp decodes a model of this shape. What it says is noise; its timing, batching,
streaming and aborts are a real engine's.

GGUF is llama.cpp's own format (tensor names and metadata keys as ``convert_hf_to_gguf.py`` writes
them for ``llama``); ``gguf`` is the writer llama.cpp publishes on PyPI.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

# Word pieces after the bytes (SentencePiece marks a leading space with U+2581).
_WORD_PIECES = (
    "\u2581the", "\u2581a", "\u2581and", "\u2581of", "\u2581to", "\u2581is", "\u2581in",
    "\u2581def", "\u2581return", "\u2581test", "\u2581code", "\u2581file", "\u2581run",
    "\u2581assert", "\u2581import", "\u2581fix", "\u2581bug", "\u2581pass", "\u2581fail",
)  # fmt: skip
_UNKNOWN, _CONTROL, _BYTE, _NORMAL = 2, 3, 6, 1  # llama.cpp's token types


@dataclass(frozen=True)
class TinyModelShape:
    """The decoder's shape: by default a few million parameters, quick to decode on one core."""

    embedding: int = 256
    layers: int = 4
    heads: int = 4
    feed_forward: int = 688
    context: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        if self.embedding % self.heads:
            raise ValueError("embedding must be divisible by heads")
        if min(self.embedding, self.layers, self.heads, self.feed_forward, self.context) < 1:
            raise ValueError("every dimension must be >= 1")

    @property
    def name(self) -> str:
        return "loom-tiny-{embedding}x{layers}-s{seed}".format(**asdict(self))


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types: ``<unk>``, ``<s>``, ``</s>``, the 256 bytes, pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + list(_WORD_PIECES)
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(_WORD_PIECES))]
    types = [_UNKNOWN, _CONTROL, _CONTROL] + [_BYTE] * 256 + [_NORMAL] * len(_WORD_PIECES)
    return tokens, scores, types


def write_tiny_model(path: Path, shape: TinyModelShape | None = None) -> Path:
    """Write the model to ``path`` (atomically: a reader never sees half a file)."""
    import gguf  # a runtime dependency of the CPU engine only

    shape = shape or TinyModelShape()
    rng = np.random.default_rng(shape.seed)
    tokens, scores, types = vocabulary()
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=path.parent, suffix=".gguf.partial")
    os.close(handle)
    os.chmod(partial, 0o644)  # mkstemp's file is private; the engine may run as another user
    try:
        writer = gguf.GGUFWriter(partial, "llama")
        writer.add_name(shape.name)
        writer.add_context_length(shape.context)
        writer.add_embedding_length(shape.embedding)
        writer.add_block_count(shape.layers)
        writer.add_feed_forward_length(shape.feed_forward)
        writer.add_head_count(shape.heads)
        writer.add_head_count_kv(shape.heads)
        writer.add_layer_norm_rms_eps(1e-5)
        writer.add_rope_dimension_count(shape.embedding // shape.heads)
        writer.add_vocab_size(len(tokens))
        writer.add_file_type(gguf.LlamaFileType.ALL_F32)
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_unk_token_id(0)
        writer.add_add_bos_token(True)

        def weight(name: str, rows: int, columns: int) -> None:
            values = rng.standard_normal((rows, columns), dtype=np.float32) / np.sqrt(columns)
            writer.add_tensor(name, values.astype(np.float32))  # float32: ALL_F32

        ones = np.ones(shape.embedding, dtype=np.float32)
        weight("token_embd.weight", len(tokens), shape.embedding)
        writer.add_tensor("output_norm.weight", ones)
        weight("output.weight", len(tokens), shape.embedding)
        for layer in range(shape.layers):
            block = f"blk.{layer}"
            writer.add_tensor(f"{block}.attn_norm.weight", ones)
            writer.add_tensor(f"{block}.ffn_norm.weight", ones)
            for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
                weight(f"{block}.{part}.weight", shape.embedding, shape.embedding)
            weight(f"{block}.ffn_gate.weight", shape.feed_forward, shape.embedding)
            weight(f"{block}.ffn_up.weight", shape.feed_forward, shape.embedding)
            weight(f"{block}.ffn_down.weight", shape.embedding, shape.feed_forward)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return path


def tiny_model(directory: Path, shape: TinyModelShape | None = None) -> Path:
    """The model file for ``shape`` under ``directory``, written on first use."""
    shape = shape or TinyModelShape()
    path = directory / f"{shape.name}.gguf"
    if not path.exists():
        write_tiny_model(path, shape)
    return path
