"""``python -m workers.agents.gpu``: service arguments, and errors that name what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.agents.gpu.__main__ import parse_service
from workers.agents.gpu.devices import discover_devices
from workers.agents.gpu.sglang_backend import SglangService
from workers.agents.gpu.torch_backend import TorchService


def test_torch_and_sglang_services_parse(checkpoints: dict[str, Path]) -> None:
    devices = discover_devices(2, 1_000)
    torch_service = parse_service(f"rm=torch:reward:{checkpoints['reward']}", devices)
    assert isinstance(torch_service, TorchService) and torch_service.name == "rm"
    sglang = parse_service(f"t=sglang:logprobs:{checkpoints['teacher']}:4000", devices)
    assert isinstance(sglang, SglangService) and sglang.device_mb(2) == 2_000


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("rm", "expected NAME=BACKEND:TASK:PATH"),
        ("rm=torch:judge:/x", "task must be one of"),
        ("rm=vllm:reward:/x", "backend must be torch"),
        ("rm=sglang:reward:/x", "backend must be torch .3 parts. or sglang .4 parts."),
    ],
)
def test_bad_service_arguments_name_the_problem(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_service(text, discover_devices(1, 10))


def test_a_directory_without_a_checkpoint_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no config\.json"):
        parse_service(f"rm=torch:reward:{tmp_path}", discover_devices(1, 10))


def _main_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    from workers.agents.gpu.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--pool", "gpu", "--node-id", "n1", *argv])
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_start_up_errors_are_one_line_naming_the_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = _main_error(capsys, "--devices", "1", "--device-memory-mb", "10", "--service",
                      f"rm=torch:reward:{tmp_path}")  # fmt: skip
    assert "--service" in err and "no config.json" in err and "Traceback" not in err
    err = _main_error(capsys, "--devices", "1", "--device-memory-mb", "10")
    assert "--service: at least one is required" in err


def test_without_cuda_the_device_options_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: devices are discovered, not declared")
    err = _main_error(capsys, "--service", "rm=torch:reward:/x")
    assert "--devices: without CUDA" in err and "Traceback" not in err
