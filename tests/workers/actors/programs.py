"""Actor programs for the elastic-actor tests, loaded by the zygote by import path."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA_FIELDS = {
    "x": {"shape": [], "dtype": "float32"},
    "actor_step": {"shape": [], "dtype": "int64"},
}


class CountingProgram:
    """An actor whose state is a counter; a marker file ``block-<actor>`` in ``LOOM_TEST_DIR``
    makes the invocation that claims it write half its batch and then hang (a fault to kill)."""

    def prepare(self) -> None:
        self.prepared_in = os.getpid()

    def start(self, actor: str, seed: int) -> dict[str, Any]:
        return {"actor": actor, "count": 0}

    def sample(
        self, state: dict[str, Any], params: Any, steps: int
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        values = np.arange(state["count"], state["count"] + steps)
        batch: dict[str, np.ndarray] = {
            "x": values.astype(np.float32),
            "actor_step": values.astype(np.int64),
        }
        marker = Path(os.environ["LOOM_TEST_DIR"]) / f"block-{state['actor']}"
        try:
            os.rename(marker, marker.with_name(f"blocked-{state['actor']}"))
        except FileNotFoundError:
            pass
        else:
            from workers.buffers.service import BufferClient

            client = BufferClient(os.environ["LOOM_TEST_BUFFER"])
            half = {key: values[: steps // 2] for key, values in batch.items()}
            client.put("rollout", state["actor"], half)
            client.close()
            (marker.with_name(f"written-{state['actor']}")).touch()
            time.sleep(600)  # killed here
        return {**state, "count": state["count"] + steps}, batch


program = CountingProgram()
