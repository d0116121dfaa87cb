"""deploy/dev/with-services.sh: throwaway PostgreSQL and Redis where none answers, stopped after."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from bench._execution import free_port, listening

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "dev" / "with-services.sh"


@pytest.mark.slow
def test_starts_both_where_none_answers_and_stops_them_after() -> None:
    if shutil.which("redis-cli") is None or shutil.which("psql") is None:
        pytest.skip("psql or redis-cli missing: nothing to check the throwaway servers with")
    pg_port, redis_port = free_port(), free_port()
    inside = (
        f"psql -h 127.0.0.1 -p {pg_port} -U postgres -tAc 'select 41 + 1' && "
        f"redis-cli -p {redis_port} ping && exit 7"
    )
    env = {**os.environ, "LOOM_PG_PORT": str(pg_port), "LOOM_REDIS_PORT": str(redis_port)}
    done = subprocess.run(
        [str(SCRIPT), "bash", "-c", inside], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 7, done.stderr  # the command's own status comes back
    assert done.stdout.split() == ["42", "PONG"]
    assert "stopped the throwaway PostgreSQL" in done.stderr
    assert "stopped the throwaway Redis" in done.stderr
    assert not listening(pg_port) and not listening(redis_port)


def test_uses_what_already_answers(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        env = {**os.environ, "LOOM_PG_PORT": str(port), "LOOM_REDIS_PORT": str(port)}
        done = subprocess.run(
            [str(SCRIPT), "true"], env=env, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr
    assert "started" not in done.stderr
