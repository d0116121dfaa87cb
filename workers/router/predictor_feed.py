"""The router follows the length predictor the control plane trains (heddle §4.1).

``apps.trajectories.length_predictor`` (a Celery beat task) fits the progressive predictor on
recorded trajectories and, when it beats the prompt-history prior on held-out trajectories,
stores it in Redis with a version. A router started with ``--predictor progressive`` and no
history trace polls that version and swaps the new model into its trajectory table; until the
first one arrives it predicts from the prompt history it keeps itself. The swapped-in model's
prompt prior is the router's live one, so finished trajectories keep teaching it.

The model is a pickle: it is written only by the control plane, into the Redis that already
holds the job keys the router trusts, so it crosses no boundary that key data does not.
"""

from __future__ import annotations

import json
import logging
import pickle
from typing import Any

from workers.algorithms.heddle.prediction import ProgressivePredictor
from workers.router.polling import VersionPoller
from workers.router.registry import RegistryNames
from workers.router.trajectories import TrajectoryTable

log = logging.getLogger("loom.router.predictor")


class PredictorFeed(VersionPoller):
    """Polls the trained predictor's version every ``interval_s`` and adopts a new one."""

    what = "length predictor"

    def __init__(
        self, client: Any, names: RegistryNames, table: TrajectoryTable, interval_s: float = 30.0
    ) -> None:
        self.client = client
        self.names = names
        self.table = table
        self.interval_s = interval_s
        self.version: str | None = None
        self.model: ProgressivePredictor | None = None  # the newest adopted
        self.active = True  # False while the operator chose the prompt-history prior

    async def refresh(self) -> bool:
        """Adopt the stored predictor if its version is new; whether one was adopted."""
        raw_meta = await self.client.get(self.names.length_predictor_meta)
        if raw_meta is None:
            return False
        version = str(json.loads(raw_meta)["version"])
        if version == self.version:
            return False
        blob = await self.client.get(self.names.length_predictor)
        if blob is None:
            return False
        model = pickle.loads(blob)  # written by the control plane only (see above)
        if not isinstance(model, ProgressivePredictor):
            raise TypeError(f"stored length predictor is a {type(model).__name__}")
        model.history = self.table.history
        self.model = model
        if self.active:
            self.table.predictor = model
        self.version = version
        log.info("router adopted length predictor version %s", version)
        return True
