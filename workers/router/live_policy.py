"""The router follows the routing policy an operator sets on the dashboard (Loom's own).

The control plane (``apps.trajectories.router_policy``) stores each router's chosen policy —
``heddle``, ``round_robin`` or ``least_load`` — and length predictor (``prompt_history`` or
``progressive``) in Redis under ``{prefix}:router:policy:{router}`` as JSON with a version, and
announces it on ``{prefix}:router:policy-changed``. The router polls the key (a GET a second:
nothing to resubscribe after Redis comes back) and, on a new version, swaps the policy its
forwarder routes with and the predictor its trajectory table asks — no restart. In-flight
requests finish where they are; the next step of every trajectory is routed by the new policy.
A stored value the router does not know is logged and ignored, never half-applied.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from workers.router.forward import Forwarder
from workers.router.policies import POLICIES, RoutingPolicy
from workers.router.polling import VersionPoller
from workers.router.predictor_feed import PredictorFeed
from workers.router.registry import RegistryNames

log = logging.getLogger("loom.router.policy")

PREDICTORS = ("prompt_history", "progressive")


class PolicyFeed(VersionPoller):
    """Polls this router's stored policy every ``interval_s`` and adopts a new version."""

    what = "router policy"

    def __init__(
        self,
        client: Any,
        names: RegistryNames,
        router: str,
        forwarder: Forwarder,
        make_policy: Callable[[str], RoutingPolicy],
        *,
        predictor: str = "prompt_history",
        predictors: PredictorFeed | None = None,
        interval_s: float = 1.0,
    ) -> None:
        self.client = client
        self.key = names.router_policy(router)
        self.forwarder = forwarder
        self.make_policy = make_policy
        self.predictors = predictors
        self.interval_s = interval_s
        self.version: str | None = None
        self.predictor = predictor  # the one in use (the command line's until a change)
        self._started_with = forwarder.table.predictor  # a model trained from --history-trace

    async def refresh(self) -> bool:
        """Adopt the stored policy if its version is new; whether it was adopted."""
        raw = await self.client.get(self.key)
        if raw is None:
            return False
        stored = json.loads(raw)
        version = str(stored.get("version"))
        if version == self.version:
            return False
        policy, predictor = stored.get("policy"), stored.get("predictor")
        self.version = version  # a bad value is reported once, not every poll
        if policy not in POLICIES or predictor not in PREDICTORS:
            log.error("stored router policy %r / predictor %r unknown; ignored", policy, predictor)
            return False
        if policy != self.forwarder.policy.name:
            self.forwarder.policy = self.make_policy(policy)
        self._use_predictor(predictor)
        log.info("router adopted policy %s, predictor %s (version %s)", policy, predictor, version)
        return True

    def _use_predictor(self, predictor: str) -> None:
        table = self.forwarder.table
        self.predictor = predictor
        if self.predictors is not None:
            self.predictors.active = predictor == "progressive"
        if predictor == "prompt_history":
            table.predictor = table.history
        elif self.predictors is not None and self.predictors.model is not None:
            table.predictor = self.predictors.model
        elif self._started_with is not table.history:
            table.predictor = self._started_with
