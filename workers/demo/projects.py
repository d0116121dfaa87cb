"""Generate small, real Python projects with a test suite, as an AI-coding rollout would produce.

Each test does a fixed amount of CPU work (prime sieving), so a suite's single-core time is
``tests × work`` and ``pytest -n {dop}`` (pytest-xdist) shortens it with sub-linear efficiency:
the elastic reward action of arl-tangram §2.2 (Figure 2(b)).
"""

from __future__ import annotations

import shlex
import sys
import textwrap
from pathlib import Path

MODULE = textwrap.dedent(
    '''
    """A tiny library the rollout "wrote"."""


    def primes_below(limit: int) -> list[int]:
        sieve = bytearray([1]) * limit
        sieve[0:2] = b"\\x00\\x00"
        for i in range(2, int(limit**0.5) + 1):
            if sieve[i]:
                sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
        return [i for i, flag in enumerate(sieve) if flag]


    def busy(rounds: int) -> int:
        total = 0
        for r in range(rounds):
            total += len(primes_below(20_000 + r))
        return total
    '''
).lstrip()

TEST_TEMPLATE = textwrap.dedent(
    """
    from calc import busy, primes_below


    def test_small_primes():
        assert primes_below(20) == [2, 3, 5, 7, 11, 13, 17, 19]

    {cases}
    """
).lstrip()

CASE = """
def test_busy_{index}():
    assert busy({rounds}) > 0
"""


def write_project(root: Path, *, tests: int, rounds_per_test: int) -> Path:
    """Write ``calc.py`` and ``test_calc.py`` under ``root``; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "calc.py").write_text(MODULE)
    cases = "".join(CASE.format(index=i, rounds=rounds_per_test) for i in range(tests))
    (root / "test_calc.py").write_text(TEST_TEMPLATE.format(cases=cases))
    (root / "conftest.py").write_text("")
    return root


def reward_command(project: Path, python: str = sys.executable) -> str:
    """The elastic reward action: copy the project into the sandbox, run its suite on {dop} cores.

    ``python`` defaults to this interpreter, which has pytest and pytest-xdist installed.
    """
    # Only xdist is loaded: the sandbox must not pick up the control plane's own pytest plugins.
    return (
        f"cp -r {shlex.quote(str(project))}/. . && PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "
        f"{shlex.quote(python)} -m pytest -q -p no:cacheprovider -p xdist -n {{dop}} test_calc.py"
    )
