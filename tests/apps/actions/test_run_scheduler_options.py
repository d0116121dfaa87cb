"""``run_scheduler``'s pass settings: parsed into the config; a bad value refused by name."""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError

from apps.actions.management.commands.run_scheduler import Command
from workers.algorithms.tangram.scheduler import DEFAULT_CANDIDATE_CAP


def _parsed(*argv: str) -> dict[str, object]:
    parser = Command().create_parser("manage.py", "run_scheduler")
    return vars(parser.parse_args(["--pool", "cpu", *argv]))


def test_defaults_are_the_schedulers_own() -> None:
    options = _parsed()
    assert options["rest_model"] == "efficient"
    assert options["candidate_cap"] == DEFAULT_CANDIDATE_CAP


@pytest.mark.parametrize(("value", "expected"), [("8", 8), ("none", None), ("None", None)])
def test_candidate_cap_takes_a_count_or_none(value: str, expected: int | None) -> None:
    assert _parsed("--candidate-cap", value)["candidate_cap"] == expected


def test_rest_model_minimum_is_accepted() -> None:
    assert _parsed("--rest-model", "minimum")["rest_model"] == "minimum"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("--candidate-cap", "0"), "--candidate-cap"),
        (("--candidate-cap", "many"), "--candidate-cap"),
        (("--rest-model", "cheapest"), "--rest-model"),
    ],
)
def test_bad_pass_settings_are_refused_naming_the_option(argv: tuple[str, ...], named: str) -> None:
    with pytest.raises(CommandError, match=named):
        _parsed(*argv)
