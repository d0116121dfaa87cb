"""What an elastic actor runs (artos §4.3): a program prepared once, actors restored from their
own checkpoint on every invocation.

CRIU cannot checkpoint processes on these machines, so the process image is not what is saved.
Instead the expensive, shared part (imports, the environment's and the policy's construction)
is done once in a zygote by ``prepare``; every invocation forks the zygote and restores only the
actor's *own* state (environment state, RNG, counters) from a small checkpoint written after its
previous sampling. A program is named by an import path ``module:attribute`` so a cold start in
a fresh interpreter (the baseline) runs exactly the same code.
"""

from __future__ import annotations

import importlib
import os
import pickle
from pathlib import Path
from typing import Any, Protocol


class ProgramError(ValueError):
    """A program path or checkpoint that cannot be used; the message names it."""


class ActorProgram(Protocol):
    def prepare(self) -> None:
        """Once per zygote (or cold start): imports, models, environment templates."""
        ...

    def start(self, actor: str, seed: int) -> Any:
        """A fresh actor state (its first invocation)."""
        ...

    def sample(self, state: Any, params: Any, steps: int) -> tuple[Any, dict[str, Any]]:
        """Run ``steps`` environment steps with ``params``; the new state and the batch."""
        ...


def load_program(path: str) -> ActorProgram:
    """``package.module:attribute``; the attribute is a program or a class making one."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ProgramError(f"program: expected 'module:attribute', got {path!r}")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ProgramError(f"program: cannot load {path!r}: {error}") from error
    program: ActorProgram = target() if isinstance(target, type) else target
    return program


def checkpoint_path(directory: str | Path, actor: str) -> Path:
    if not actor or "/" in actor or actor.startswith("."):
        raise ProgramError(f"actor: {actor!r} is not a usable actor name")
    return Path(directory) / f"{actor}.ckpt"


def save_checkpoint(directory: str | Path, actor: str, state: Any) -> int:
    """Write atomically (rename), so a kill mid-write leaves the previous checkpoint whole."""
    path = checkpoint_path(directory, actor)
    temporary = path.with_suffix(f".tmp{os.getpid()}")
    data = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    temporary.write_bytes(data)
    os.replace(temporary, path)
    return len(data)


def load_checkpoint(directory: str | Path, actor: str) -> Any | None:
    """The actor's last state, or None before its first checkpoint."""
    path = checkpoint_path(directory, actor)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return pickle.loads(data)  # written by this actor's own process; never from the network
