"""The local backend's sandbox, proven from inside real actions (bubblewrap, no stand-ins).

Each boundary an action must not cross is tried by an action: other trajectories' files, Loom's
keys, repository and database file, /etc/shadow, writing outside its directory, /tmp of another
action, escaping through /proc, the agent's environment, a fork bomb; and what the host sees of
it (uid, capabilities). The network has its own module (``test_local_sandbox_network.py``).
Skipped, with the reason printed, only where bubblewrap cannot run at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.workers.agents.conftest import (
    cpu_dispatch,
    leftover_processes,
    skip_unless_bwrap_runs,
    unique_node_id,
    wait_until,
)
from workers.agents.common import procs
from workers.agents.cpu.__main__ import build_backend, build_parser
from workers.agents.cpu.cgroups import detect_cgroup_driver
from workers.agents.cpu.local import LocalBackend
from workers.agents.cpu.sandbox import (
    INSECURE_VARIABLE,
    WORKDIR,
    Sandbox,
    SandboxUnavailable,
    open_sandbox,
    python_runtime_binds,
)
from workers.transport import Dispatch

REPOSITORY = Path(__file__).resolve().parents[3]
# Every process forks for ever, sleeping briefly when the kernel refuses: it presses on the limit
# until the timeout instead of giving up (as a shell does at its first failed fork).
_FORK_BOMB = """python3 -c '
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
'"""


@pytest.fixture(scope="module", autouse=True)
def _bwrap_runs() -> None:
    skip_unless_bwrap_runs("local sandbox tests")


@pytest.fixture
def node_id(request: pytest.FixtureRequest) -> str:
    return unique_node_id(request, "sbx")


@pytest.fixture
async def backend(tmp_path: Path, node_id: str) -> AsyncIterator[LocalBackend]:
    local = LocalBackend(node_id=node_id, work_root=tmp_path / "work")
    yield local
    await local.close()


async def _run(local: LocalBackend, command: str, **fields: Any) -> str:
    outcome = await local.run(cpu_dispatch(uuid.uuid4().hex[:8], command, **fields))
    return outcome.output.decode()


def _status(pid: int) -> dict[str, str]:
    text = (procs.PROC / str(pid) / "status").read_text()
    return {k: v.strip() for k, v in (line.split(":", 1) for line in text.splitlines())}


async def test_host_sees_an_unprivileged_uid_without_capabilities(backend: LocalBackend) -> None:
    assert backend.sandbox is not None
    uid = backend.sandbox.host_uid
    assert uid != 0
    marker = f"{backend.node_id}/who:1"
    running = asyncio.create_task(backend.run(cpu_dispatch("who", "sleep 20", timeout_s=30)))
    try:

        def statuses() -> list[dict[str, str]]:
            found = []
            for pid in procs.marked_pids(marker):
                with contextlib.suppress(OSError):  # a process that has just exited
                    found.append(_status(pid))
            return found

        await wait_until(lambda: any(s["Name"] == "sleep" for s in statuses()), 10)
        for status in statuses():
            assert int(status["CapEff"], 16) == 0, status  # bwrap's own processes too
            assert status["NoNewPrivs"] == "1", status
            if status["Name"] == "bwrap":
                continue
            assert status["Uid"].split() == [str(uid)] * 4, status
            assert status["Groups"] == "", status
            for capabilities in ("CapPrm", "CapInh", "CapBnd", "CapAmb"):
                assert int(status[capabilities], 16) == 0, status
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert procs.marked_pids(marker) == []


async def test_other_trajectories_and_the_work_root_are_out_of_reach(
    backend: LocalBackend,
) -> None:
    await _run(backend, "echo secret-of-t1 > notes; chmod 644 notes", trajectory_id="t1")
    theirs = backend.trajectory_dir("t1") / "notes"
    assert theirs.read_text() == "secret-of-t1\n"
    reads = await _run(
        backend,
        f"cat {theirs}; cat {WORKDIR}/../t1/notes; ls {backend.work_root}",
        trajectory_id="t2",
    )
    assert "secret-of-t1" not in reads
    assert reads.count("No such file or directory") == 3, reads
    listing = await _run(backend, f"ls -a {WORKDIR}; ls -a {WORKDIR}/..", trajectory_id="t2")
    assert "t1" not in listing.split() and "notes" not in listing.split(), listing
    root_mode = backend.work_root.stat()
    assert (root_mode.st_uid, root_mode.st_mode & 0o777) == (0, 0o711)
    own = backend.trajectory_dir("t2").stat()
    assert backend.sandbox is not None
    assert (own.st_uid, own.st_mode & 0o777) == (backend.sandbox.host_uid, 0o700)


async def test_keys_repository_and_database_file_are_invisible(
    tmp_path: Path, node_id: str
) -> None:
    """With the virtualenv bound as the demo's runtime binds it: still nothing of Loom's."""
    var = tmp_path / "var"
    var.mkdir()
    key = var / "admin_api_key"
    key.write_text("staff-key-must-not-leak\n")
    key.chmod(0o600)
    database = var / "loom.sqlite3"
    database.write_text("SQLite format 3 must-not-leak")
    sandbox = open_sandbox(ro_binds=python_runtime_binds(), protected=[REPOSITORY, var])
    local = LocalBackend(node_id=node_id, work_root=tmp_path / "work", sandbox=sandbox)
    try:
        secrets = [
            key,
            database,
            REPOSITORY / "var" / "admin_api_key",
            REPOSITORY / "var" / "secret_key",
            REPOSITORY / "var" / "loom.sqlite3",
            REPOSITORY / "pyproject.toml",
            REPOSITORY / "controlplane" / "settings" / "base.py",
        ]
        probe = "; ".join(f"cat {path} 2>/dev/null || echo hidden" for path in secrets)
        output = await _run(local, probe)
        assert "must-not-leak" not in output
        assert output.split() == ["hidden"] * len(secrets), output
        listing = await _run(
            local, f"ls -a {REPOSITORY} 2>/dev/null; ls -a {var} 2>/dev/null; echo end"
        )
        names = set(listing.split()) - {".", "..", "end"}
        visible = {path.name for path in python_runtime_binds() if path.parent == REPOSITORY}
        assert names <= visible, listing  # at most the bound virtualenv
    finally:
        await local.close()


async def test_etc_has_no_shadow_and_no_host_accounts(backend: LocalBackend) -> None:
    output = await _run(backend, "cat /etc/shadow || echo no-shadow; ls /etc; cat /etc/passwd")
    assert "no-shadow" in output
    assert "shadow\n" not in output.replace("no-shadow", "")
    accounts = [line.split(":")[0] for line in output.splitlines() if line.count(":") == 6]
    assert accounts == ["root", "loom-sandbox"]


async def test_nothing_outside_the_working_directory_is_writable(backend: LocalBackend) -> None:
    targets = ["/usr/x", "/x", "/etc/x", "/var/x", "/dev/x", "/proc/x", "/bin/x"]
    name = f"loom-probe-{uuid.uuid4().hex[:8]}"
    probe = "; ".join(f"touch {t}-{name} 2>/dev/null && echo WROTE {t}" for t in targets)
    output = await _run(backend, f"{probe}; touch {WORKDIR}/ok && echo workdir-ok")
    assert "WROTE" not in output
    assert "workdir-ok" in output
    assert (backend.trajectory_dir("t") / "ok").exists()
    assert not any(Path(f"{t}-{name}").exists() for t in targets)


async def test_tmp_is_private_to_each_action(backend: LocalBackend) -> None:
    mark = f"mark-{uuid.uuid4().hex[:8]}"
    writer = _run(backend, f"echo x > /tmp/{mark} && ls /tmp && sleep 2", trajectory_id="a")
    reader = _run(backend, "sleep 1; ls -a /tmp", trajectory_id="b")
    written, read = await asyncio.gather(writer, reader)
    assert written.split() == [mark]
    assert read.split() == [".", ".."]
    again = await _run(backend, "ls -a /tmp", trajectory_id="a")
    assert again.split() == [".", ".."]  # not even the same trajectory's next action
    assert not (Path("/tmp") / mark).exists()


async def test_ordinary_tools_work_inside(backend: LocalBackend) -> None:
    """What a sandbox leaves must still run real tools: processes with semaphores, temp files,
    the loader, name lookups of its own account."""
    pool = "import multiprocessing as m; print(sum(m.Pool(2).map(abs, [-1, -2])))"
    command = f"python3 -c '{pool}' && mktemp && whoami && nproc && echo ok"
    outcome = await backend.run(cpu_dispatch("tools", command))
    assert outcome.exit_code == 0, outcome.output
    lines = outcome.output.decode().split()
    assert lines[0] == "3" and lines[1].startswith("/tmp/") and lines[-1] == "ok"
    assert lines[2] == "loom-sandbox"


async def test_no_user_namespaces_of_its_own(backend: LocalBackend) -> None:
    """Whether or not the host lets unprivileged users make user namespaces, a sandboxed action
    cannot make one (nor become root in one and mount over what it sees)."""
    probe = (
        "unshare -U -r id || echo blocked; unshare -U -r -m mount -t tmpfs x /tmp || echo no-mount"
    )
    output = await _run(backend, probe)
    assert "blocked" in output and "no-mount" in output, output
    assert "uid=0" not in output


async def test_proc_shows_only_the_sandbox(backend: LocalBackend) -> None:
    agent = os.getpid()
    probe = (
        "ls /proc | grep -cE '^[0-9]+$'; "
        "cat /proc/1/environ >/dev/null 2>&1 && echo READ-ENVIRON; "
        "ls /proc/1/root/ >/dev/null 2>&1 && echo READ-ROOT; "
        "ls /proc/1/cwd/ >/dev/null 2>&1 && echo READ-CWD; "
        f"test -e /proc/{agent} && echo SEES-AGENT; "
        "kill -9 1 2>/dev/null && echo KILLED-INIT; "
        "echo 1 2>/dev/null > /proc/sys/kernel/sysrq && echo WROTE-SYSCTL; "
        "echo done"
    )
    output = await _run(backend, probe)
    lines = output.split("\n")
    assert int(lines[0]) <= 6, output  # bwrap's init, the shell and the probe's pipeline
    assert lines[1:] == ["done", ""], output


async def test_the_agent_environment_is_not_inherited(
    backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://loom:agent-secret@db/loom")
    monkeypatch.setenv("LOOM_SECRET_KEY", "agent-secret-key")
    output = await _run(backend, "env", env={"MY_TOOL_SETTING": "1"})
    assert "agent-secret" not in output
    names = {line.split("=", 1)[0] for line in output.splitlines() if "=" in line}
    expected = {"PATH", "LANG", "HOME", "TMPDIR", "MY_TOOL_SETTING", procs.MARKER_VARIABLE}
    expected |= {"LOOM_DOP", "LOOM_CORES", "LOOM_WORKDIR", "PWD"}
    assert names == expected, names
    assert f"HOME={WORKDIR}" in output and f"LOOM_WORKDIR={WORKDIR}" in output


async def test_a_fork_bomb_stays_within_the_pids_limit(tmp_path: Path, node_id: str) -> None:
    driver = detect_cgroup_driver(node_id)
    if driver is None or not driver.limits_pids:
        pytest.skip("no writable cgroup with a pids controller here")
    limit = 48
    local = LocalBackend(
        node_id=node_id, work_root=tmp_path / "w", cgroups=driver, pids_limit=limit
    )
    marker = f"{node_id}/"
    peak = 0
    host_forks_ok = True
    try:
        started = time.monotonic()
        bomb = asyncio.create_task(local.run(cpu_dispatch("bomb", _FORK_BOMB, timeout_s=3)))
        while not bomb.done():
            peak = max(peak, len(leftover_processes(marker)))
            done = await asyncio.to_thread(subprocess.run, ["true"], check=False)
            host_forks_ok = host_forks_ok and done.returncode == 0
            await asyncio.sleep(0.05)
        outcome = await bomb
        elapsed = time.monotonic() - started
    finally:
        await local.close()
    assert outcome.timed_out
    assert elapsed < 15
    assert limit // 2 <= peak <= limit, f"peak {peak} processes, limit {limit}"  # it pressed
    assert host_forks_ok
    assert leftover_processes(marker) == []


async def test_without_cgroups_a_fork_bomb_stays_within_the_sandbox_users_share(
    tmp_path: Path, node_id: str
) -> None:
    """RLIMIT_NPROC counts per uid across the host: a uid of this test's own keeps the count
    free of other actions running meanwhile."""
    uid = 60_000 + os.getpid() % 5_000
    sandbox = Sandbox(user=f"{uid}:{uid}")
    local = LocalBackend(
        node_id=node_id,
        work_root=tmp_path / "w",
        cgroups=None,
        sandbox=sandbox,
        pids_limit=max(1, 16 // (os.cpu_count() or 1)),
    )
    marker = f"{node_id}/"
    peak = 0
    try:
        started = time.monotonic()
        bomb = asyncio.create_task(local.run(cpu_dispatch("bomb", _FORK_BOMB, timeout_s=3)))
        while not bomb.done():
            peak = max(peak, len(leftover_processes(marker)))
            await asyncio.sleep(0.05)
        outcome = await bomb
        elapsed = time.monotonic() - started
        after = await _run(local, "echo still-runs")  # the share is free again
    finally:
        await local.close()
    assert outcome.timed_out and elapsed < 15
    assert local.fallback_nproc // 2 <= peak <= local.fallback_nproc + 2, peak  # + bwrap's two
    assert after == "still-runs\n"
    assert leftover_processes(marker) == []


async def test_affinity_fallback_finds_sandboxed_processes_from_the_host(
    tmp_path: Path, node_id: str
) -> None:
    """Without cgroups, the kill path scans the host's /proc for the marker: processes inside
    the sandbox's pid namespace, even one that left the session, are found there."""
    local = LocalBackend(node_id=node_id, work_root=tmp_path / "w", cgroups=None)
    marker = f"{node_id}/esc:1"
    running = asyncio.create_task(
        local.run(cpu_dispatch("esc", "setsid sleep 30 & sleep 31", timeout_s=30))
    )
    try:

        def names() -> list[str]:
            found = []
            for pid in procs.marked_pids(marker):
                with contextlib.suppress(OSError):
                    found.append((procs.PROC / str(pid) / "comm").read_text().strip())
            return found

        await wait_until(lambda: names().count("sleep") == 2, 10)  # both, the setsid one too
        assert names().count("bwrap") >= 2  # the outer one, the pid namespace's init (, nested)
        assert procs.kill_marked(marker) >= 4
        outcome = await running
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await local.close()
    assert outcome.exit_code != 0
    assert procs.marked_pids(marker) == []


async def test_refuses_to_run_unsandboxed_without_the_insecure_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(INSECURE_VARIABLE, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no bwrap to be found
    with pytest.raises(SandboxUnavailable) as refused:
        LocalBackend(node_id="refuse", work_root=tmp_path / "w", cgroups=None)
    message = str(refused.value)
    assert "apt-get install bubblewrap" in message and INSECURE_VARIABLE in message

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bwrap").write_text("#!/bin/sh\necho 'bwrap: no permissions' >&2\nexit 1\n")
    (broken / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", str(broken))
    with pytest.raises(SandboxUnavailable, match="self-test failed"):
        LocalBackend(node_id="refuse", work_root=tmp_path / "w", cgroups=None)

    monkeypatch.setenv(INSECURE_VARIABLE, "1")
    with caplog.at_level(logging.CRITICAL):
        insecure = LocalBackend(node_id="insecure", work_root=tmp_path / "w", cgroups=None)
    try:
        assert not insecure.sandboxed
        assert any("UNSANDBOXED" in r.getMessage() for r in caplog.records)
        output = await _run(insecure, "id -u; echo $LOOM_WORKDIR")
        assert output.split("\n")[0] == str(os.geteuid())  # it really is unsandboxed
        assert output.split("\n")[1] == str(insecure.trajectory_dir("t"))
    finally:
        await insecure.close()


async def test_the_insecure_flag_never_disables_a_working_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(INSECURE_VARIABLE, "1")
    local = LocalBackend(node_id="flagged", work_root=tmp_path / "w", cgroups=None)
    try:
        assert local.sandboxed
    finally:
        await local.close()


async def test_agent_cli_refuses_and_accepts_the_insecure_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(INSECURE_VARIABLE, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    common = ["--pool", "p", "--node-id", "cli", "--isolation", "affinity"]
    common += ["--work-root", str(tmp_path / "w")]
    with pytest.raises(SandboxUnavailable):
        build_backend(build_parser().parse_args(common))
    args = build_parser().parse_args([*common, "--insecure-unsandboxed-actions"])
    local = build_backend(args)
    try:
        assert isinstance(local, LocalBackend) and not local.sandboxed
    finally:
        await local.close()


def test_runtime_binds_never_expose_the_repository_or_the_work_root(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="would expose"):
        Sandbox(ro_binds=[REPOSITORY], protected=[REPOSITORY / "var"])
    with pytest.raises(SandboxUnavailable, match="whole sandbox"):
        Sandbox(ro_binds=[Path("/")])
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(SandboxUnavailable, match="would expose"):
        Sandbox(ro_binds=[tmp_path], protected=[work])


def test_dispatch_carries_the_tool_network_setting() -> None:
    dispatch = cpu_dispatch("n", "true", network=True)
    assert Dispatch.from_dict(dispatch.to_dict()).network is True
    assert Dispatch.from_dict(cpu_dispatch("n", "true").to_dict()).network is False
