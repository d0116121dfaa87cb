"""Batched sampling with a KV cache and a streaming hook that can abort running samples.

The hook is how DARTS' early stop (darts §4.3.1, Alg. 2 line 12) reaches the generator: every time
a sample finishes, the caller learns of it and may name still-running samples to abort; aborted
sequences leave the batch at once, so their remaining tokens are never computed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from bench.darts_lab.model import TinyCausalLM, select_rows
from bench.darts_lab.task import EOS, MAX_RESPONSE, PROMPT_LENGTH, Prompt

# (prompt index, sample number, length, truncated) -> samples (prompt index, sample number) to abort
FinishHook = Callable[[int, int, int, bool], Iterable[tuple[int, int]]]


@dataclass
class GeneratedSample:
    prompt_index: int
    sample: int
    tokens: list[int]
    truncated: bool = False
    aborted: bool = False

    @property
    def finished(self) -> bool:
        return not self.aborted and (
            self.truncated or (bool(self.tokens) and self.tokens[-1] == EOS)
        )


@torch.no_grad()
def generate(
    model: TinyCausalLM,
    prompts: Sequence[Prompt],
    samples_per_prompt: Sequence[int],
    generator: torch.Generator,
    *,
    greedy: bool = False,
    on_finished: FinishHook | None = None,
) -> list[list[GeneratedSample]]:
    """Sample ``samples_per_prompt[i]`` responses for each prompt, all decoding in one batch."""
    samples = [
        GeneratedSample(prompt_index=i, sample=s, tokens=[])
        for i, count in enumerate(samples_per_prompt)
        for s in range(count)
    ]
    by_id = {(x.prompt_index, x.sample): row for row, x in enumerate(samples)}
    if not samples:
        return [[] for _ in prompts]
    prompt_tokens = torch.tensor([prompts[x.prompt_index].tokens for x in samples])
    logits, cache = model.step(prompt_tokens, None, start=0)
    last = logits[:, -1]
    active = list(range(len(samples)))
    for position in range(MAX_RESPONSE):
        if greedy:
            next_tokens = last.argmax(dim=-1)
        else:
            next_tokens = torch.multinomial(torch.softmax(last, dim=-1), 1, generator=generator)[
                :, 0
            ]
        aborted: set[int] = set()
        still_running: list[int] = []
        keep_positions: list[int] = []
        for slot, row in enumerate(active):
            if row in aborted:
                continue
            sample = samples[row]
            sample.tokens.append(int(next_tokens[slot]))
            ended = sample.tokens[-1] == EOS
            if not ended and position == MAX_RESPONSE - 1:
                sample.truncated = ended = True
            if not ended:
                still_running.append(row)
                keep_positions.append(slot)
                continue
            if on_finished is not None:
                for key in on_finished(
                    sample.prompt_index, sample.sample, len(sample.tokens), sample.truncated
                ):
                    aborted.add(by_id[key])
        for row in aborted:
            if not samples[row].finished:  # a finished sample cannot be aborted any more
                samples[row].aborted = True
        keep = [(row, slot) for row, slot in zip(still_running, keep_positions, strict=True)]
        keep = [(row, slot) for row, slot in keep if row not in aborted]
        if not keep:
            break
        active = [row for row, _ in keep]
        rows = torch.tensor([slot for _, slot in keep])
        cache = select_rows(cache, rows)
        step_tokens = next_tokens.index_select(0, rows)[:, None]
        logits, cache = model.step(step_tokens, cache, start=PROMPT_LENGTH + position)
        last = logits[:, -1]
    grouped: list[list[GeneratedSample]] = [[] for _ in prompts]
    for sample in samples:
        grouped[sample.prompt_index].append(sample)
    return grouped
