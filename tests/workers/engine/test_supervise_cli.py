"""``python -m workers.engine supervise`` as an operator runs it: a real supervisor process
starting the emulated engine, restarting it after a crash, draining it on SIGTERM (the router
told first), giving up on an engine that cannot start, and refusing bad arguments."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.workers.engine.test_supervisor import free_port
from workers.engine.supervise import engine_command, parse_args

pytestmark = pytest.mark.usefixtures("starts_processes")

UP = re.compile(r"emulated engine up on (\S+) \(pid (\d+), start (\d+)\)")
FAST = ["--health-interval", "0.05", "--backoff", "0.05", "--backoff-max", "0.2"]
FAST += ["--stop-timeout", "5", "--drain-timeout", "20", "--health-timeout", "30"]


class Child:
    """A ``python -m`` process; its output read line by line on a thread."""

    def __init__(self, *argv: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", *argv],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def expect(self, pattern: str | re.Pattern[str], timeout_s: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found
        raise AssertionError(f"never printed {pattern!r}; output: {self.seen[-30:]}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.kill()


def supervise(children: list[Child], *argv: str, env: dict[str, str] | None = None) -> Child:
    child = Child("workers.engine", "supervise", *argv, env=env)
    children.append(child)
    return child


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie of the supervisor's not yet reaped counts as gone
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_it_restarts_a_crashed_engine_and_drains_on_sigterm(
    children: list[Child],
) -> None:
    port = free_port()
    cli = supervise(
        children, "--engine", "emulated", "--port", str(port), *FAST, "--", "--model-name", "tiny"
    )
    url, pid, start = cli.expect(UP).groups()
    assert url == f"http://127.0.0.1:{port}" and start == "1"
    assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "tiny"  # the flag passed on
    os.kill(int(pid), signal.SIGKILL)  # the engine crashes
    _, second, start = cli.expect(UP).groups()
    assert start == "2" and second != pid
    assert httpx.get(f"{url}/health").status_code == 200
    with httpx.Client(base_url=url, timeout=30) as http:
        body = {"model": "tiny", "prompt": "a", "max_tokens": 30, "stream": True}
        with http.stream("POST", "/v1/completions", json=body) as response:
            chunks = response.iter_bytes()
            next(chunks)  # the engine is decoding this request
            cli.process.send_signal(signal.SIGTERM)
            cli.expect("draining")
            text = b"".join(chunks)  # the drain let it finish whole
    assert text.endswith(b"data: [DONE]\n\n")
    cli.expect("^drained$")
    assert cli.process.wait(20) == 0
    assert gone(int(second))


def test_a_second_signal_stops_without_waiting(children: list[Child]) -> None:
    port = free_port()
    cli = supervise(children, "--engine", "emulated", "--port", str(port), *FAST)
    url, pid, _ = cli.expect(UP).groups()
    with httpx.Client(base_url=url, timeout=30) as http:
        body = {"model": "loom-emulated", "prompt": "a", "max_tokens": 5000, "stream": True}
        with http.stream("POST", "/v1/completions", json=body) as response:
            next(response.iter_bytes())
            cli.process.send_signal(signal.SIGTERM)
            cli.expect("draining")
            cli.process.send_signal(signal.SIGINT)
            cli.expect("stopped without draining")
    assert cli.process.wait(20) == 0
    assert gone(int(pid))


def test_the_router_is_told_to_drain_the_worker_first(children: list[Child]) -> None:
    router_port, engine_port = free_port(), free_port()
    engine_url = f"http://127.0.0.1:{engine_port}"
    cli = supervise(
        children, "--engine", "emulated", "--port", str(engine_port), *FAST,
        "--router", f"http://127.0.0.1:{router_port}", "--worker-name", "w0",
        env={"LOOM_ROUTER_ADMIN_TOKEN": "admin-secret"},
    )  # fmt: skip
    cli.expect(UP)
    router = Child(
        "workers.router", "--open", "--port", str(router_port), "--worker", engine_url,
        env={"LOOM_ROUTER_ADMIN_TOKEN": "admin-secret"},
    )  # fmt: skip
    children.append(router)
    router.expect("serving")
    workers = httpx.get(f"http://127.0.0.1:{router_port}/v1/loom/workers").json()["workers"]
    assert workers[0]["draining"] is False
    cli.process.send_signal(signal.SIGTERM)
    cli.expect("^drained$")
    workers = httpx.get(f"http://127.0.0.1:{router_port}/v1/loom/workers").json()["workers"]
    assert workers[0]["name"] == "w0" and workers[0]["draining"] is True
    assert cli.process.wait(20) == 0


def test_an_engine_that_never_starts_is_given_up(children: list[Child]) -> None:
    port = free_port()
    # the emulated engine refuses an unknown flag and exits at once, every time
    cli = supervise(
        children, "--engine", "emulated", "--port", str(port), *FAST, "--max-restarts", "2",
        "--", "--no-such-flag",
    )  # fmt: skip
    cli.expect("gave up after 2 failed runs in a row")
    assert cli.process.wait(20) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--engine", "sglang"], "--engine sglang needs --model-path"),
        (["--engine", "emulated", "--model-path", "/m"], "--model-path is for sglang"),
        (["--engine", "emulated", "--router", "http://r:1"], "--router and --worker-name"),
        (["--engine", "emulated", "--backoff", "0"], "--backoff must be > 0"),
        (["--engine", "emulated", "--schedule-policy", "lpm"], "invalid choice: 'lpm'"),
    ],
)
def test_bad_arguments_are_refused_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_engine_lines() -> None:
    sglang = engine_command(
        parse_args(["--model-path", "/models/m", "--port", "31000", "--tp", "2",
                    "--preemption-threshold", "5", "--", "--log-level", "debug"])
    )  # fmt: skip
    assert sglang[1:3] == ["-m", "sglang.launch_server"]
    assert "--enable-priority-scheduling" in sglang and "--enable-metrics" in sglang
    assert sglang[sglang.index("--port") + 1] == "31000" and sglang[-2:] == ["--log-level", "debug"]
    assert sglang[sglang.index("--priority-scheduling-preemption-threshold") + 1] == "5"
    llamacpp = engine_command(
        parse_args(["--engine", "llamacpp", "--port", "1", "--", "--slots", "4"])
    )
    assert llamacpp[1:] == ["-m", "workers.engine", "--backend", "llamacpp", "--host",
                            "127.0.0.1", "--port", "1", "--slots", "4"]  # fmt: skip


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("sglang") is not None, reason="sglang is installed"
)
def test_sglang_missing_is_said_plainly() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "workers.engine", "supervise", "--model-path", "/m"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "sglang is not installed" in done.stderr
