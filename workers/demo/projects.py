"""Small, real Python projects with a test suite, as an AI-coding rollout would produce them.

Each test does a fixed amount of CPU work (prime sieving), so a suite's single-core time is
``tests × work`` and ``pytest -n {dop}`` (pytest-xdist) shortens it with sub-linear efficiency:
the elastic reward action of arl-tangram §2.2 (Figure 2(b)).

The rollout writes its project inside its own sandbox (``write_command``, a tool action like any
other) and the reward runs there (``suite_command``): a sandbox sees nothing of the host's files,
so nothing is copied in from outside. ``parse_suite`` reads the reward from the suite's output.
"""

from __future__ import annotations

import re
import shlex
import sys
import textwrap
from dataclasses import dataclass
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
_END = "LOOM_DEMO_EOF"


def project_files(*, tests: int, rounds_per_test: int) -> dict[str, str]:
    """File name → content of a project whose suite has ``tests + 1`` tests."""
    cases = "".join(CASE.format(index=i, rounds=rounds_per_test) for i in range(tests))
    return {
        "calc.py": MODULE,
        "test_calc.py": TEST_TEMPLATE.format(cases=cases),
        "conftest.py": "",
    }


def write_project(root: Path, *, tests: int, rounds_per_test: int) -> Path:
    """Write the project under ``root`` (on the host); returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for name, content in project_files(tests=tests, rounds_per_test=rounds_per_test).items():
        (root / name).write_text(content)
    return root


def write_command(*, tests: int, rounds_per_test: int) -> str:
    """A shell command writing the project into the current directory (quoted here-documents)."""
    files = project_files(tests=tests, rounds_per_test=rounds_per_test)
    return (
        "\n".join(f"cat > {name} <<'{_END}'\n{content}{_END}" for name, content in files.items())
        + "\necho wrote "
        + " ".join(files)
    )


def suite_command(python: str = sys.executable) -> str:
    """The elastic reward: the suite of the project in the current directory on {dop} cores.

    ``python`` defaults to this interpreter, which has pytest and pytest-xdist installed (the
    sandbox binds its installation read-only). It first prints the cores it may run on.
    """
    # Only xdist is loaded: the sandbox must not pick up any other pytest plugin installed there.
    return (
        'echo "cores: $(nproc)" && PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 '
        f"{shlex.quote(python)} -m pytest -q -p no:cacheprovider -p xdist -n {{dop}} test_calc.py"
    )


def reward_command(*, tests: int, rounds_per_test: int, python: str = sys.executable) -> str:
    """Write the project, then run its suite: one self-contained action."""
    written = write_command(tests=tests, rounds_per_test=rounds_per_test)
    return f"{written} >/dev/null\n{suite_command(python)}"


@dataclass(frozen=True)
class SuiteResult:
    passed: int
    failed: int
    cores: int | None

    @property
    def score(self) -> float:
        """The reward: the fraction of tests that passed (0 when nothing ran)."""
        total = self.passed + self.failed
        return self.passed / total if total else 0.0


_COUNT = re.compile(r"(\d+) (passed|failed|errors?)\b")
_CORES = re.compile(r"^cores: (\d+)$", re.MULTILINE)


def parse_suite(output: str) -> SuiteResult:
    """Counts from pytest's summary line (``3 failed, 14 passed in 2.1s``) and the cores line."""
    passed = failed = 0
    for number, kind in _COUNT.findall(output):
        if kind == "passed":
            passed = int(number)
        else:
            failed += int(number)
    cores = _CORES.search(output)
    return SuiteResult(passed, failed, int(cores.group(1)) if cores else None)
