"""PPO (Schulman et al. 2017, artos §6.1's on-policy workload): the one policy, loss and update
that both ARTOS-on-Loom and the Ray baseline run, so only the orchestration differs between them.

Clipped surrogate objective, a value loss and an entropy bonus, generalised advantage
estimation, several epochs of shuffled mini-batches per iteration (CleanRL's ``ppo.py`` layout,
which artos §6.1 takes its hyper-parameters from). Actors call ``ActorCritic.act``; the learner
calls ``PPOLearner.update`` with each actor's contiguous segment of steps.

Pure in the sense of ``workers.algorithms``: numpy arrays in, numpy arrays out, no I/O, no
clock; torch is the numerical library of the model and its update.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

Arrays = Mapping[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class PPOConfig:
    obs_dim: int = 4
    actions: int = 2
    hidden: int = 64
    lr: float = 2.5e-3
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    epochs: int = 4
    minibatches: int = 4
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    max_grad_norm: float = 0.5
    seed: int = 0


def _mlp(inputs: int, hidden: int, outputs: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(
        torch.nn.Linear(inputs, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, outputs),
    )


class ActorCritic(torch.nn.Module):
    """Separate policy and value MLPs (CleanRL's classic-control PPO)."""

    def __init__(self, config: PPOConfig) -> None:
        super().__init__()
        self.policy = _mlp(config.obs_dim, config.hidden, config.actions)
        self.value = _mlp(config.obs_dim, config.hidden, 1)

    def act(self, obs: npt.NDArray[Any], rng: np.random.Generator) -> tuple[int, float]:
        """One action for one observation, drawn with the actor's own generator (so a restored
        actor continues its random stream), and its log-probability."""
        with torch.no_grad():
            logits = self.policy(torch.as_tensor(obs, dtype=torch.float32)[None])[0]
            log_probs = torch.log_softmax(logits, 0).numpy().astype(np.float64)
        probs = np.exp(log_probs)
        action = int(rng.choice(len(probs), p=probs / probs.sum()))
        return action, float(log_probs[action])


def load_params(model: torch.nn.Module, params: Arrays) -> None:
    """Load weights published as numpy arrays (the buffer's model data, or a Ray object)."""
    state = {k: torch.from_numpy(np.asarray(v)) for k, v in params.items() if "." in k}
    model.load_state_dict(state)


def export_params(model: torch.nn.Module) -> dict[str, npt.NDArray[Any]]:
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def gae(
    rewards: npt.NDArray[Any],
    values: npt.NDArray[Any],
    next_values: npt.NDArray[Any],
    terminated: npt.NDArray[Any],
    episode_end: npt.NDArray[Any],
    gamma: float,
    lam: float,
) -> npt.NDArray[np.float32]:
    """Generalised advantage estimates over ``(segments, steps)`` arrays.

    ``next_values`` is V(s_{t+1}) of each step's own next observation, so a truncated episode
    and a segment's last step bootstrap from it; ``terminated`` zeroes the bootstrap and
    ``episode_end`` (terminated or truncated) stops the recursion at an episode boundary.
    """
    advantages = np.zeros_like(rewards, dtype=np.float32)
    running = np.zeros(rewards.shape[0], np.float32)
    for t in range(rewards.shape[1] - 1, -1, -1):
        delta = rewards[:, t] + gamma * next_values[:, t] * (1.0 - terminated[:, t]) - values[:, t]
        last = t == rewards.shape[1] - 1
        carry = 0.0 if last else 1.0
        running = delta + gamma * lam * carry * (1.0 - episode_end[:, t]) * running
        advantages[:, t] = running
    return advantages


class PPOLearner:
    """The learner's model, optimiser and update; ``params`` is what the actors load."""

    def __init__(self, config: PPOConfig) -> None:
        self.config = config
        torch.manual_seed(config.seed)
        self.model = ActorCritic(config)
        self.optimiser = torch.optim.Adam(self.model.parameters(), lr=config.lr, eps=1e-5)
        self.rng = np.random.default_rng(config.seed)
        self.updates = 0

    def params(self) -> dict[str, npt.NDArray[Any]]:
        return export_params(self.model)

    def to(self, device: str) -> None:
        """Move the model and the optimiser's state (the on-demand device lease moves it)."""
        self.model.to(device)
        for state in self.optimiser.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = value.to(device)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def update(self, batch: Arrays, segments: int) -> dict[str, float]:
        """One PPO iteration on ``segments`` actors' equal, contiguous segments of steps."""
        config, device = self.config, self.device

        def tensor(key: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.as_tensor(np.asarray(batch[key]), dtype=dtype, device=device)

        obs, next_obs = tensor("obs"), tensor("next_obs")
        with torch.no_grad():
            values = self.model.value(obs)[:, 0].cpu().numpy()
            next_values = self.model.value(next_obs)[:, 0].cpu().numpy()
        shape = (segments, -1)
        terminated = np.asarray(batch["terminated"], np.float32).reshape(shape)
        episode_end = np.asarray(batch["done"], np.float32).reshape(shape)
        advantages = gae(
            np.asarray(batch["reward"], np.float32).reshape(shape),
            values.reshape(shape),
            next_values.reshape(shape),
            terminated,
            episode_end,
            config.gamma,
            config.gae_lambda,
        ).reshape(-1)
        returns = advantages + values
        actions = tensor("action", torch.int64)
        old_logp = tensor("logp")
        adv_all = torch.as_tensor(advantages, device=device)
        ret_all = torch.as_tensor(returns, device=device)
        size = len(advantages)
        minibatch = max(1, size // config.minibatches)
        losses = []
        for _ in range(config.epochs):
            order = self.rng.permutation(size)
            for start in range(0, size, minibatch):
                index = torch.as_tensor(order[start : start + minibatch], device=device)
                logits = self.model.policy(obs[index])
                log_probs = torch.log_softmax(logits, 1)
                logp = log_probs.gather(1, actions[index][:, None])[:, 0]
                entropy = -(log_probs.exp() * log_probs).sum(1).mean()
                adv = adv_all[index]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                ratio = torch.exp(logp - old_logp[index])
                surrogate = torch.min(
                    ratio * adv, ratio.clamp(1 - config.clip, 1 + config.clip) * adv
                )
                value_loss = (
                    0.5 * (self.model.value(obs[index])[:, 0] - ret_all[index]).pow(2).mean()
                )
                loss = -surrogate.mean() + config.value_coef * value_loss
                loss = loss - config.entropy_coef * entropy
                self.optimiser.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.max_grad_norm)
                self.optimiser.step()
                losses.append(float(loss.detach()))
        self.updates += 1
        return {"loss": float(np.mean(losses)), "steps": float(size)}
