"""A synthetic verifiable task with both of darts §3.2.2's tail patterns and a long length tail.

Pointer chasing. A prompt is ``BOS Cc s f0 … f9 =``: a count token ``Cc`` with
``c ∈ {1, …, 12}``, a start digit ``s`` and a random function ``f`` on the digits 0–9 written as
its table ``f(0) … f(9)``. The answer is ``f^c(s)``, ``f`` applied ``c`` times, a digit: a
uniform guess is right one time in ten (the benchmark reports the best guess that uses only the
prompt's ``s`` and ``c``, measured on the held-out prompts).

- ``c = 1`` (easy, Pattern I "verbose and ineffective tails"): one table look-up; the model
  answers ``A x EOS`` directly (three tokens). It may also ramble (``.`` tokens) before
  answering, and rambling answers are right only half the time ("trapped in incorrect logical
  loops").
- ``c ≥ 2`` (hard, Pattern II "necessary and effective tails"): the model writes the chain
  ``x1 … xc`` (``x_j = f(x_{j-1})``, ``x_0 = s``: one look-up per token) and then ``A xc EOS``:
  ``c + 3`` tokens. The demonstrations never answer a hard prompt directly except by a guess
  (a premature conclusion, right one time in ten), and an answer after a ramble is a guess too.
- Task version 2 adds §3.2.2's "chains that are correct but verbose" on hard prompts: a ramble,
  then the full correct chain and answer (:data:`MIX_V2`). The reward does not penalise that
  verbosity when the model executes the chain right after its ramble, so only the choice of
  which samples train (dual-end selection, §4.1.3 Prop. 1) can shed it; version 1
  (:data:`MIX_V1`) has no such mode, and GRPO of every kind sheds its
  rambles because they end in guesses.

A response is ``.* digits* A x EOS``; reward 1 when the digit after the first ``A`` is right and
EOS follows it, else 0. A response that reaches ``MAX_RESPONSE`` tokens without EOS is truncated.

Prompts: ``EASY_SHARE`` have ``c = 1``, the rest draw ``c`` uniformly from 2 … 12. The style
warm-up's demonstrations mix, per prompt kind, a concise answer, the chain and a ramble
(``EASY_STYLE``, ``HARD_STYLE``). Ramble lengths follow a discrete Pareto law with tail index 1
(``P(r ≥ x) = 2/x`` up to ``MAX_RAMBLE``), so the warmed-up policy's response lengths are
long-tailed (darts §3.2.1: a batch's longest response is many times its mean).

Known limit of version 1: the reward itself penalises the verbose tail (after a ramble a hard
prompt's answer is a guess, an easy prompt's a coin flip), so GRPO of any kind sheds it within a
few steps; what remains is the necessary chain length, which DARTS must not cut.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAD, BOS, EOS, ANSWER, RAMBLE, EQUALS = range(6)
DIGIT0 = 6
BASE = 10
MIN_COUNT, MAX_COUNT = 1, 12
COUNT0 = DIGIT0 + BASE  # the token of count c is COUNT0 + c - MIN_COUNT
VOCAB_SIZE = COUNT0 + MAX_COUNT - MIN_COUNT + 1
PROMPT_LENGTH = 3 + BASE + 1
MAX_RESPONSE = 96
MAX_RAMBLE = MAX_RESPONSE - 6
EASY_SHARE = 0.4  # share of prompts with c = 1; the rest draw c uniformly from 2 … 12


@dataclass(frozen=True)
class DemonstrationMix:
    """The style warm-up's response modes per prompt kind, as shares summing to 1: a concise
    answer (a guess on a hard prompt), the chain, a verbose chain (a ramble, then the correct
    chain and answer) and a ramble ending in an answer (right ``ramble_answer_right`` of the time
    on an easy prompt, a guess on a hard one). ``version`` is part of the warm-up cache key."""

    version: int
    easy: tuple[float, float, float, float]
    hard: tuple[float, float, float, float]
    ramble_answer_right: float

    def __post_init__(self) -> None:
        for shares in (self.easy, self.hard):
            if min(shares) < 0 or abs(sum(shares) - 1.0) > 1e-9:
                raise ValueError("each kind's shares must be non-negative and sum to 1")


MIX_V1 = DemonstrationMix(
    version=1, easy=(0.5, 0.15, 0.0, 0.35), hard=(0.2, 0.45, 0.0, 0.35), ramble_answer_right=0.5
)
# Version 2 moves part of the hard prompts' chains and rambles to correct-but-verbose chains.
MIX_V2 = DemonstrationMix(
    version=2, easy=(0.5, 0.15, 0.0, 0.35), hard=(0.2, 0.3, 0.3, 0.2), ramble_answer_right=0.5
)
MIXES = {mix.version: mix for mix in (MIX_V1, MIX_V2)}

_SYMBOLS = {PAD: "_", BOS: "^", EOS: "$", ANSWER: "A", RAMBLE: ".", EQUALS: "="}


@dataclass(frozen=True)
class Prompt:
    """One task instance; ``key`` identifies it across epochs (the variance store's prompt id)."""

    count: int
    start: int
    table: tuple[int, ...]

    @property
    def hard(self) -> bool:
        return self.count > MIN_COUNT

    @property
    def key(self) -> str:
        return f"{self.count}:{self.start}:" + "".join(map(str, self.table))

    @property
    def tokens(self) -> list[int]:
        return [
            BOS,
            COUNT0 + self.count - MIN_COUNT,
            DIGIT0 + self.start,
            *(DIGIT0 + d for d in self.table),
            EQUALS,
        ]

    def chain(self) -> list[int]:
        """``x1 … xc``: the chain of look-ups (its last entry is the answer)."""
        values, current = [], self.start
        for _ in range(self.count):
            current = self.table[current]
            values.append(current)
        return values

    @property
    def answer(self) -> int:
        return self.chain()[-1]


def make_prompts(
    count: int, rng: np.random.Generator, exclude: set[str] | None = None
) -> list[Prompt]:
    """``count`` distinct prompts (``EASY_SHARE`` easy), none whose key is in ``exclude``."""
    taken = set() if exclude is None else set(exclude)
    prompts: list[Prompt] = []
    while len(prompts) < count:
        easy = rng.random() < EASY_SHARE
        steps = MIN_COUNT if easy else int(rng.integers(MIN_COUNT + 1, MAX_COUNT + 1))
        prompt = Prompt(
            count=steps,
            start=int(rng.integers(0, BASE)),
            table=tuple(int(d) for d in rng.integers(0, BASE, BASE)),
        )
        if prompt.key in taken:
            continue
        taken.add(prompt.key)
        prompts.append(prompt)
    return prompts


def _answer(digit: int) -> list[int]:
    return [ANSWER, DIGIT0 + digit, EOS]


def _chain_response(prompt: Prompt) -> list[int]:
    return [*(DIGIT0 + x for x in prompt.chain()), *_answer(prompt.answer)]


def skill_demonstration(prompt: Prompt) -> list[int]:
    """The clean response: direct answer for c = 1, the chain then the answer otherwise."""
    return _answer(prompt.answer) if not prompt.hard else _chain_response(prompt)


def ramble_length(rng: np.random.Generator) -> int:
    """Discrete Pareto, tail index 1: ``P(r ≥ x) = 2/x`` for ``2 ≤ x ≤ MAX_RAMBLE``."""
    return int(min(MAX_RAMBLE, np.floor(2.0 / (1.0 - rng.random()))))


def demonstration(
    prompt: Prompt, rng: np.random.Generator, mix: DemonstrationMix = MIX_V2
) -> list[int]:
    """One response of the verbose, noisy mix the style warm-up fits (before RL)."""
    concise, chain, verbose, _ = mix.easy if not prompt.hard else mix.hard
    draw = rng.random()
    guess = int(rng.integers(0, BASE))
    if draw < concise:
        return _answer(prompt.answer if not prompt.hard else guess)
    if draw < concise + chain:
        return _chain_response(prompt)
    if draw < concise + chain + verbose:
        correct = skill_demonstration(prompt)
        ramble = [RAMBLE] * min(ramble_length(rng), MAX_RESPONSE - len(correct))
        return [*ramble, *correct]
    ramble = [RAMBLE] * ramble_length(rng)
    right = not prompt.hard and rng.random() < mix.ramble_answer_right
    return [*ramble, *_answer(prompt.answer if right else guess)]


def score(prompt: Prompt, response: list[int]) -> float:
    """Verifiable reward: 1 when ``A <correct digit> EOS`` closes the response, else 0."""
    if ANSWER not in response:
        return 0.0
    at = response.index(ANSWER)
    tail = response[at + 1 : at + 3]
    return 1.0 if tail == [DIGIT0 + prompt.answer, EOS] else 0.0


def best_guess_accuracy(prompts: list[Prompt]) -> float:
    """Accuracy of the best answer rule that reads only ``c`` and ``s`` (no look-up): per count,
    the better of a uniform guess (``1/BASE``; ``f`` is uniform, so no fixed digit does better)
    and "answer ``s``" (right when ``s`` lies on a cycle whose length divides ``c``)."""
    if not prompts:
        return 0.0
    by_count: dict[int, list[Prompt]] = {}
    for prompt in prompts:
        by_count.setdefault(prompt.count, []).append(prompt)
    right = 0.0
    for group in by_count.values():
        echo = float(np.mean([p.answer == p.start for p in group]))
        right += max(1.0 / BASE, echo) * len(group)
    return right / len(prompts)


def render(tokens: list[int]) -> str:
    """Human-readable tokens (debugging and the benchmark's example printout)."""
    names = dict(_SYMBOLS)
    names.update({DIGIT0 + d: str(d) for d in range(BASE)})
    names.update({COUNT0 + c - MIN_COUNT: f"C{c}" for c in range(MIN_COUNT, MAX_COUNT + 1)})
    return " ".join(names.get(t, "?") for t in tokens)
