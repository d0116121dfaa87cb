"""Starting the zygote by forking the process that runs the pool (``start_method="fork"``).

A zygote started as a fresh interpreter imports the program's libraries again (torch alone is
about a CPU-second), on the critical path before the first actor samples. When the pool runs
inside the job's own process, which has usually imported them already, forking that process
gives the zygote those modules for nothing: it only prepares the program and serves. It leaves
its heap in the parent's pages (no huge-page collapse, which would copy all of it).

Forking is safe only while this process runs no other thread of Python's and holds no ZeroMQ
context (its I/O threads would not exist in the child, and a lock one of them held would stay
held there); ``fork_safe`` checks both, and the pool falls back to a fresh interpreter when it
says no. The forked zygote never returns into the caller's code: it serves and ends with
``os._exit``, so the job's ``atexit`` handlers and finalisers (temporary directories, say) run
in the job alone. Native thread pools that register fork handlers (OpenBLAS) are forked as
``multiprocessing``'s fork start method forks them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

from workers.actors.zygote import serve_program


def fork_safe() -> bool:
    """No other Python thread and no ZeroMQ context in this process."""
    zmq = sys.modules.get("zmq")
    context = None if zmq is None else getattr(zmq.Context, "_instance", None)
    return threading.active_count() == 1 and context is None


class ForkedZygote:
    """The zygote forked from this process: what the pool uses of ``subprocess.Popen``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (a subreaper's sweep)
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"zygote {self.pid}", timeout or 0.0)
            time.sleep(0.005)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def fork_zygote(program: str, control: socket.socket, manager_end: socket.socket) -> ForkedZygote:
    """Fork this process into a zygote serving ``program`` on ``control`` (the child closes
    the manager's end of the pair; the caller closes ``control``)."""
    for stream in (sys.stdout, sys.stderr):  # buffered output is not written twice
        with contextlib.suppress(Exception):
            stream.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            manager_end.close()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as a fresh interpreter's
            # no huge-page collapse: it would copy the job's whole heap (shared copy-on-write)
            # to make actor forks cheaper, and kept-warm actors fork rarely
            serve_program(program, control, collapse=False)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return ForkedZygote(pid)
