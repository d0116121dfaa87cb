"""DQN (Mnih et al. 2015, an off-policy workload of artos §2.2 Table 1: uniformly sampled replay):
the one Q-network, epsilon schedule, loss and update that ARTOS-on-Loom and the Ray baseline
both run.

Target network synced every ``target_every`` updates, Huber loss, epsilon decaying linearly
with the environment steps collected so far (CleanRL's ``dqn.py`` layout). The learner publishes
the epsilon with the weights, so every actor explores at the schedule's current value.

Pure in the sense of ``workers.algorithms``: numpy arrays in and out, no I/O, no clock; torch
is the numerical library of the model and its update.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from workers.algorithms.artos.ppo import export_params

Arrays = Mapping[str, npt.NDArray[Any]]

EPSILON_KEY = "epsilon"  # published with the weights (a 0-d array)


@dataclass(frozen=True)
class DQNConfig:
    obs_dim: int = 4
    actions: int = 2
    hidden: int = 128
    lr: float = 1e-3
    gamma: float = 0.99
    batch_size: int = 64
    target_every: int = 100
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay_steps: int = 8_000
    learning_starts: int = 1_000
    updates_per_step: float = 0.25  # gradient steps per collected environment step
    seed: int = 0


def q_network(config: DQNConfig) -> torch.nn.Sequential:
    return torch.nn.Sequential(
        torch.nn.Linear(config.obs_dim, config.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(config.hidden, config.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(config.hidden, config.actions),
    )


def epsilon(config: DQNConfig, env_steps: int) -> float:
    """Linear decay from ``eps_start`` to ``eps_end`` over ``eps_decay_steps`` steps."""
    fraction = min(1.0, env_steps / config.eps_decay_steps)
    return config.eps_start + fraction * (config.eps_end - config.eps_start)


def epsilon_greedy(
    model: torch.nn.Module,
    obs: npt.NDArray[Any],
    eps: float,
    rng: np.random.Generator,
    actions: int,
) -> int:
    """A random action with probability ``eps``, else the greedy one (actor side)."""
    if rng.random() < eps:
        return int(rng.integers(actions))
    with torch.no_grad():
        q_values = model(torch.as_tensor(obs, dtype=torch.float32)[None])[0]
    return int(torch.argmax(q_values))


def updates_due(config: DQNConfig, env_steps: int, updates_done: int) -> int:
    """Gradient steps owed after ``env_steps`` collected steps (none before learning starts)."""
    if env_steps < config.learning_starts:
        return 0
    owed = int((env_steps - config.learning_starts) * config.updates_per_step)
    return max(0, owed - updates_done)


class DQNLearner:
    """Online and target networks, optimiser and update."""

    def __init__(self, config: DQNConfig) -> None:
        self.config = config
        torch.manual_seed(config.seed)
        self.model = q_network(config)
        self.target = copy.deepcopy(self.model)
        self.optimiser = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.updates = 0

    def params(self, env_steps: int) -> dict[str, npt.NDArray[Any]]:
        """The weights and the epsilon the actors should explore with now."""
        params = export_params(self.model)
        params[EPSILON_KEY] = np.asarray(epsilon(self.config, env_steps), np.float32)
        return params

    def to(self, device: str) -> None:
        self.model.to(device)
        self.target.to(device)
        for state in self.optimiser.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = value.to(device)

    def update(self, batch: Arrays) -> float:
        """One gradient step on a uniformly sampled mini-batch; returns the loss."""
        device = next(self.model.parameters()).device

        def tensor(key: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.as_tensor(np.asarray(batch[key]), dtype=dtype, device=device)

        obs, next_obs = tensor("obs"), tensor("next_obs")
        actions = tensor("action", torch.int64)
        rewards, terminated = tensor("reward"), tensor("terminated")
        with torch.no_grad():
            next_q = self.target(next_obs).max(1).values
            target = rewards + self.config.gamma * next_q * (1.0 - terminated)
        q_taken = self.model(obs).gather(1, actions[:, None])[:, 0]
        loss = torch.nn.functional.smooth_l1_loss(q_taken, target)
        self.optimiser.zero_grad()
        loss.backward()
        self.optimiser.step()
        self.updates += 1
        if self.updates % self.config.target_every == 0:
            self.target.load_state_dict(self.model.state_dict())
        return float(loss.detach())
