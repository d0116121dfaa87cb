"""A synthetic verifiable task with both of darts §3.2.2's tail patterns.

A prompt is ``BOS T d1 … d8 =``: eight binary digits (``DIGITS_PER_PROMPT``, ``BASE = 2``) and a
task token ``T``. Arithmetic is mod 2, i.e. XOR.

- ``E`` (easy, Pattern I "verbose and ineffective tails"): the answer is ``(d1 + d2) mod 2``. The
  concise response ``A x EOS`` is enough; the policy may also ramble (``.`` tokens) before
  answering, and rambling answers are less reliable ("trapped in incorrect logical loops").
- ``H`` (hard, Pattern II "necessary and effective tails"): the answer is ``(d1 + … + d8) mod 2``.
  A tiny model cannot sum eight digits in one token, but it can write the running sums
  ``p2 … p8`` first (each one ``(prev + d) mod 2``, the easy skill) and then ``A p8 EOS``.

A response is ``.* digits* A x EOS``; reward 1 when the digit after the first ``A`` is right and
EOS follows it, else 0. A response that reaches ``MAX_RESPONSE`` tokens without EOS is truncated.

Known limits of this testbed (left for a larger one): with ``BASE = 2`` a guess is right half
the time, so short guesses on hard prompts are rewarded half the time; lengths are capped at
``MAX_RESPONSE`` (max/mean length stays near 2, far from the papers' long tails).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAD, BOS, EOS, ANSWER, RAMBLE, EASY, HARD, EQUALS = range(8)
DIGIT0 = 8
VOCAB_SIZE = DIGIT0 + 10
DIGITS_PER_PROMPT = 8
PROMPT_LENGTH = 2 + DIGITS_PER_PROMPT + 1
MAX_RESPONSE = 24
BASE = 2  # bits, arithmetic mod 2 (XOR): a skill a CPU warm-up learns in well under a minute

_SYMBOLS = {
    PAD: "_",
    BOS: "^",
    EOS: "$",
    ANSWER: "A",
    RAMBLE: ".",
    EASY: "E",
    HARD: "H",
    EQUALS: "=",
}


@dataclass(frozen=True)
class Prompt:
    """One task instance; ``key`` identifies it across epochs (the variance store's prompt id)."""

    hard: bool
    digits: tuple[int, ...]

    @property
    def key(self) -> str:
        return ("H" if self.hard else "E") + "".join(map(str, self.digits))

    @property
    def tokens(self) -> list[int]:
        return [BOS, HARD if self.hard else EASY, *(DIGIT0 + d for d in self.digits), EQUALS]

    @property
    def answer(self) -> int:
        if self.hard:
            return sum(self.digits) % BASE
        return (self.digits[0] + self.digits[1]) % BASE

    def running_sums(self) -> list[int]:
        """``p2 … p8``: the chain of thought a hard prompt needs."""
        sums, total = [], self.digits[0]
        for digit in self.digits[1:]:
            total = (total + digit) % BASE
            sums.append(total)
        return sums


def make_prompts(
    count: int, rng: np.random.Generator, exclude: set[str] | None = None
) -> list[Prompt]:
    """``count`` distinct prompts, half easy and half hard, none whose key is in ``exclude``."""
    taken = set() if exclude is None else set(exclude)
    prompts: list[Prompt] = []
    while len(prompts) < count:
        hard = len(prompts) % 2 == 1
        prompt = Prompt(
            hard=hard, digits=tuple(int(d) for d in rng.integers(0, BASE, DIGITS_PER_PROMPT))
        )
        if prompt.key in taken:
            continue
        taken.add(prompt.key)
        prompts.append(prompt)
    return prompts


def skill_demonstration(prompt: Prompt) -> list[int]:
    """The clean response: concise for easy prompts, chain of thought for hard ones."""
    if not prompt.hard:
        return [ANSWER, DIGIT0 + prompt.answer, EOS]
    thought = [DIGIT0 + s for s in prompt.running_sums()]
    return [*thought, ANSWER, DIGIT0 + prompt.answer, EOS]


def demonstration(prompt: Prompt, rng: np.random.Generator) -> list[int]:
    """A supervised response in the style of a verbose base model (the SFT warm-up's data).

    Easy: 30% concise, 70% rambling 2–20 tokens first, and a rambling answer is wrong 20% of the
    time. Hard: 50% chain of thought, 50% a guess (after 0–20 rambling tokens).
    """
    ramble: list[int]
    if not prompt.hard:
        if rng.random() < 0.3:
            return [ANSWER, DIGIT0 + prompt.answer, EOS]
        ramble = [RAMBLE] * int(rng.integers(2, 21))
        answer = prompt.answer if rng.random() >= 0.2 else int(rng.integers(0, BASE))
        return [*ramble, ANSWER, DIGIT0 + answer, EOS]
    if rng.random() < 0.5:
        thought = [DIGIT0 + s for s in prompt.running_sums()]
        return [*thought, ANSWER, DIGIT0 + prompt.answer, EOS]
    ramble = [RAMBLE] * int(rng.integers(0, 21))
    return [*ramble, ANSWER, DIGIT0 + int(rng.integers(0, BASE)), EOS]


def score(prompt: Prompt, response: list[int]) -> float:
    """Verifiable reward: 1 when ``A <correct digit> EOS`` closes the response, else 0."""
    if ANSWER not in response:
        return 0.0
    at = response.index(ANSWER)
    tail = response[at + 1 : at + 3]
    return 1.0 if tail == [DIGIT0 + prompt.answer, EOS] else 0.0


def render(tokens: list[int]) -> str:
    """Human-readable tokens (debugging and the benchmark's example printout)."""
    return "".join(_SYMBOLS.get(t, str(t - DIGIT0)) for t in tokens)
