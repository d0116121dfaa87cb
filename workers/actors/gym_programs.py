"""The reference workloads' actor programs (issue 20, artos §6.1): PPO and DQN actors on a
gymnasium environment, sampling with the shared models of ``workers.algorithms.artos``.

The same program object runs as a Loom elastic actor (forked from the zygote, restored from its
checkpoint each invocation) and inside a Ray actor (alive the whole run), so sampling is
identical in both systems. The state an actor checkpoints: its environment (with its RNG), the
current observation, its random generator, the running episode return and a step counter.

Each batch carries ``episode_return``: the return of an episode that ended at that step, NaN
elsewhere; the learning curves are built from it.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import numpy.typing as npt

from workers.actors.program import ProgramError
from workers.algorithms.artos.dqn import EPSILON_KEY, DQNConfig, epsilon_greedy, q_network
from workers.algorithms.artos.ppo import ActorCritic, PPOConfig, load_params

ENV_ID = "CartPole-v1"


class GymProgram:
    """What the PPO and DQN actors share: the environment loop and its checkpointed state."""

    env_id = ENV_ID

    def __init__(self) -> None:
        self.gym: Any = None
        self.torch: Any = None
        self.model: Any = None

    def _imports(self) -> None:
        try:
            import gymnasium
            import torch
        except ImportError as error:  # gymnasium is in requirements/dev.txt
            raise ProgramError(f"program: {self.env_id} needs gymnasium and torch") from error
        torch.set_num_threads(1)  # no intra-op pool: forked children stay safe, one core each
        self.gym, self.torch = gymnasium, torch

    def _warm_up(self) -> None:
        """Run the sampling path and a checkpoint round trip once on a throwaway environment
        with its own generator, so the lazy first-call set-up (torch's operators, gymnasium's
        checks, pickle's lookups) happens once in the zygote, not again in every forked actor.
        The model only runs forward: training is unchanged."""
        state, _ = self.sample(self.start("warm-up", 0), None, 4)
        pickle.loads(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
        state["env"].close()

    def start(self, actor: str, seed: int) -> dict[str, Any]:
        env = self.gym.make(self.env_id)
        obs, _ = env.reset(seed=seed)
        return {
            "env": env,
            "obs": obs,
            "rng": np.random.default_rng(seed),
            "episode_return": 0.0,
            "steps": 0,
        }

    def _act(self, obs: npt.NDArray[Any], params: Any, rng: np.random.Generator) -> dict[str, Any]:
        raise NotImplementedError

    def sample(
        self, state: dict[str, Any], params: Any, steps: int
    ) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
        if params:
            self._load(params)
        env, obs, rng = state["env"], state["obs"], state["rng"]
        episode_return = float(state["episode_return"])
        columns: dict[str, list[Any]] = {key: [] for key in self.schema_fields()}
        for _ in range(steps):
            chosen = self._act(obs, params, rng)
            next_obs, reward, terminated, truncated, _ = env.step(chosen["action"])
            episode_return += float(reward)
            done = bool(terminated or truncated)
            row = {
                "obs": obs,
                "next_obs": next_obs,
                "reward": reward,
                "terminated": terminated,
                "done": done,
                "episode_return": episode_return if done else np.nan,
                **chosen,
            }
            for key in columns:
                columns[key].append(row[key])
            if done:
                obs, episode_return = env.reset()[0], 0.0
            else:
                obs = next_obs
        batch = {
            key: np.asarray(values, dtype=self.schema_fields()[key]["dtype"])
            for key, values in columns.items()
        }
        new_state = {
            **state,
            "obs": obs,
            "episode_return": episode_return,
            "steps": state["steps"] + steps,
        }
        return new_state, batch

    def _load(self, params: Any) -> None:
        load_params(self.model, params)

    def schema_fields(self) -> dict[str, dict[str, Any]]:
        raise NotImplementedError


def _common_fields(obs_dim: int) -> dict[str, dict[str, Any]]:
    return {
        "obs": {"shape": [obs_dim], "dtype": "float32"},
        "next_obs": {"shape": [obs_dim], "dtype": "float32"},
        "action": {"shape": [], "dtype": "int64"},
        "reward": {"shape": [], "dtype": "float32"},
        "terminated": {"shape": [], "dtype": "bool"},
        "done": {"shape": [], "dtype": "bool"},
        "episode_return": {"shape": [], "dtype": "float32"},
    }


class PPOProgram(GymProgram):
    """Samples with the PPO policy; records each action's log-probability."""

    def __init__(self) -> None:
        super().__init__()
        self.config = PPOConfig()

    def prepare(self) -> None:
        self._imports()
        self.model = ActorCritic(self.config)
        self._warm_up()

    def _act(self, obs: npt.NDArray[Any], params: Any, rng: np.random.Generator) -> dict[str, Any]:
        action, logp = self.model.act(obs, rng)
        return {"action": action, "logp": logp}

    def schema_fields(self) -> dict[str, dict[str, Any]]:
        return {**_common_fields(self.config.obs_dim), "logp": {"shape": [], "dtype": "float32"}}


class DQNProgram(GymProgram):
    """Samples epsilon-greedily with the DQN Q-network and the published epsilon."""

    def __init__(self) -> None:
        super().__init__()
        self.config = DQNConfig()
        self.eps = self.config.eps_start

    def prepare(self) -> None:
        self._imports()
        self.model = q_network(self.config)
        self._warm_up()

    def _load(self, params: Any) -> None:
        super()._load(params)
        if EPSILON_KEY in params:
            self.eps = float(np.asarray(params[EPSILON_KEY]).reshape(-1)[0])  # 0-d or (1,)

    def _act(self, obs: npt.NDArray[Any], params: Any, rng: np.random.Generator) -> dict[str, Any]:
        return {"action": epsilon_greedy(self.model, obs, self.eps, rng, self.config.actions)}

    def schema_fields(self) -> dict[str, dict[str, Any]]:
        return _common_fields(self.config.obs_dim)


ppo = PPOProgram()
dqn = DQNProgram()
