"""The reference actor program: CartPole (gymnasium) driven by a small torch policy.

Used by the elastic-actor tests and the pre-warm benchmark as a real, if small, RL actor: the
zygote pays the imports (torch, gymnasium) and builds the policy once; an actor's checkpoint is
its environment (with its RNG), the current observation and its step counter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.actors.program import ProgramError

OBS_DIM, ACTIONS, HIDDEN = 4, 2, 64


class CartPoleProgram:
    """Sample CartPole-v1 with a categorical MLP policy whose weights come as numpy arrays."""

    def __init__(self) -> None:
        self.torch: Any = None
        self.gym: Any = None
        self.policy: Any = None

    def prepare(self) -> None:
        try:
            import gymnasium
            import torch
        except ImportError as error:  # gymnasium is in requirements/dev.txt
            raise ProgramError(f"program: CartPole needs gymnasium and torch ({error})") from error
        torch.set_num_threads(1)  # no intra-op thread pool: forked children stay safe
        self.torch, self.gym = torch, gymnasium
        self.policy = torch.nn.Sequential(
            torch.nn.Linear(OBS_DIM, HIDDEN),
            torch.nn.Tanh(),
            torch.nn.Linear(HIDDEN, ACTIONS),
        )
        with torch.no_grad():
            self.policy(torch.zeros(1, OBS_DIM))
        gymnasium.make("CartPole-v1").close()

    def initial_params(self) -> dict[str, np.ndarray]:
        return {
            name: value.detach().numpy().copy() for name, value in self.policy.state_dict().items()
        }

    def start(self, actor: str, seed: int) -> dict[str, Any]:
        env = self.gym.make("CartPole-v1")
        obs, _ = env.reset(seed=seed)
        return {"env": env, "obs": obs, "steps": 0, "rng": np.random.default_rng(seed)}

    def sample(
        self, state: dict[str, Any], params: dict[str, np.ndarray] | None, steps: int
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        torch = self.torch
        if params:
            self.policy.load_state_dict(
                {k: torch.from_numpy(np.asarray(v)) for k, v in params.items()}
            )
        env, obs, rng = state["env"], state["obs"], state["rng"]
        out_obs = np.zeros((steps, OBS_DIM), np.float32)
        out_action = np.zeros(steps, np.int64)
        out_reward = np.zeros(steps, np.float32)
        out_done = np.zeros(steps, np.bool_)
        out_logp = np.zeros(steps, np.float32)
        with torch.no_grad():
            for step in range(steps):
                logits = self.policy(torch.as_tensor(obs, dtype=torch.float32)[None])[0]
                probs = torch.softmax(logits, 0).numpy().astype(np.float64)
                action = int(rng.choice(ACTIONS, p=probs / probs.sum()))
                next_obs, reward, terminated, truncated, _ = env.step(action)
                out_obs[step], out_action[step], out_reward[step] = obs, action, reward
                out_done[step] = terminated or truncated
                out_logp[step] = np.log(probs[action])
                obs = env.reset()[0] if out_done[step] else next_obs
        state = {**state, "obs": obs, "steps": state["steps"] + steps}
        batch: dict[str, np.ndarray] = {
            "obs": out_obs,
            "action": out_action,
            "reward": out_reward,
            "done": out_done,
            "logp": out_logp,
        }
        return state, batch


def schema_fields() -> dict[str, dict[str, Any]]:
    """The buffer schema the program's batches fit."""
    return {
        "obs": {"shape": [OBS_DIM], "dtype": "float32"},
        "action": {"shape": [], "dtype": "int64"},
        "reward": {"shape": [], "dtype": "float32"},
        "done": {"shape": [], "dtype": "bool"},
        "logp": {"shape": [], "dtype": "float32"},
    }


program = CartPoleProgram()
