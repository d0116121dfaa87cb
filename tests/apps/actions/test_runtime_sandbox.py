"""The embedded runtime (``make demo``'s process tree) builds its local agent on a sandbox and
refuses to start without one unless LOOM_INSECURE_UNSANDBOXED_ACTIONS is set."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from apps.actions.runtime import EmbeddedRuntime
from apps.resources.models import PoolKind
from tests.factories import PoolFactory
from workers.agents.cpu.agent import CpuAgent
from workers.agents.cpu.local import LocalBackend
from workers.agents.cpu.sandbox import SandboxUnavailable

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _local_backends(runtime: EmbeddedRuntime) -> list[LocalBackend]:
    return [
        agent.backend
        for agent in runtime.agents
        if isinstance(agent, CpuAgent) and isinstance(agent.backend, LocalBackend)
    ]


async def test_refuses_without_a_sandbox_unless_the_insecure_setting_is_on(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.to_thread(PoolFactory.create, name="cpu", kind=PoolKind.CPU)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no bwrap to be found
    settings.LOOM_INSECURE_UNSANDBOXED_ACTIONS = False
    refused = EmbeddedRuntime(work_root=tmp_path / "a", cores=[0])
    try:
        with pytest.raises(SandboxUnavailable, match="install bubblewrap"):
            await refused.start()
    finally:
        await refused.stop()

    settings.LOOM_INSECURE_UNSANDBOXED_ACTIONS = True
    insecure = EmbeddedRuntime(work_root=tmp_path / "b", cores=[0])
    await insecure.start()
    try:
        [backend] = _local_backends(insecure)
        assert not backend.sandboxed
    finally:
        await insecure.stop()


async def test_sandboxed_with_the_interpreter_bound_and_work_root_private(
    tmp_path: Path, settings: Any
) -> None:
    await asyncio.to_thread(PoolFactory.create, name="cpu", kind=PoolKind.CPU)
    runtime = EmbeddedRuntime(work_root=tmp_path / "w", cores=[0])
    await runtime.start()
    try:
        [backend] = _local_backends(runtime)
        assert backend.sandbox is not None
        assert backend.sandbox.ro_binds  # this interpreter, for tools that run its Python
        repository = Path(settings.BASE_DIR).resolve()
        assert all(not repository.is_relative_to(b.resolve()) for b in backend.sandbox.ro_binds)
        if os.geteuid() == 0:
            assert (tmp_path / "w").stat().st_mode & 0o777 == 0o711
    finally:
        await runtime.stop()
