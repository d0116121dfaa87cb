"""Small HF-format checkpoints made here (random weights, seeded) for the GPU agent's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.agents.gpu.checkpoints import create_checkpoint


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gpu-checkpoints")
    return {
        "reward": create_checkpoint(root / "reward", "reward", seed=1),
        "reward2": create_checkpoint(root / "reward2", "reward", seed=3),
        "reward3": create_checkpoint(root / "reward3", "reward", seed=4),
        "teacher": create_checkpoint(root / "teacher", "logprobs", seed=2),
    }
