"""The zygote: a process that prepared an actor program once and forks an actor per invocation
(artos §4.3, with a fork-based restore path where CRIU is unavailable).

Run as ``python -m workers.actors.zygote --program module:attr --fd N``: ``N`` is a
``SOCK_SEQPACKET`` socket to the pool manager (one message per packet, so children can report on
the same socket without interleaving). Requests (JSON): ``prewarm`` and ``invoke`` fork an actor
(a pre-warmed one restores its state and then waits for ``go``), ``go``, ``kill``, ``exit``.
Events: ``prepared``, ``forked``, ``ready``, ``sampled``, ``checkpointed``, ``failed``,
``exited``. A request's ``keep_warm_s`` keeps the actor's process parked that long after its
checkpoint (no CPU; its state in memory): its invocation is reported ``exited`` (code 0,
``kept_warm``) and its next one is served over its link without a fork or a restore (Loom's own,
in the spirit of artos §4.3's pre-warming); an idle one is retired, its checkpoint remains.
Times are ``time.monotonic()`` (one clock for every process of the node).

The zygote stays single-threaded and never opens a ZeroMQ context, so forking it is safe; each
child lowers its priority to the request's ``niceness`` (the job's learner first on a shared
core), pins itself to its cores, restores its checkpoint, pulls parameters, samples, hands its
batch to the buffer (one connection for both), checkpoints and exits. ``--cold`` is the
baseline: a fresh interpreter that imports and prepares the program and restores the actor,
then reports ready.

What a fork and an exit cost is set by the zygote's page tables: importing torch leaves well over
a hundred megabytes of anonymous memory (heap and allocator regions) that every fork copies the
page-table entries of and every exit unmaps again. The zygote therefore keeps that memory in
2 MiB transparent huge pages (glibc's ``malloc.hugetlb`` tunable from its start, then
``MADV_COLLAPSE`` of what is left once prepared), so both are a fraction of the 4 KiB-page cost
(Loom's own; artos §4.3 restores with CRIU instead).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers.actors.program import ActorProgram, load_checkpoint, load_program, save_checkpoint

MAX_PACKET = 1 << 16
HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE, _MADV_COLLAPSE = 14, 25  # linux/mman.h; MADV_COLLAPSE since Linux 6.1
HUGE_PAGE_TUNABLE = "glibc.malloc.hugetlb=1"  # malloc asks for transparent huge pages (glibc 2.35+)


def zygote_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment to start a zygote with: the caller's, plus glibc's tunable that backs
    the malloc heap by transparent huge pages (it must be set before the interpreter starts)."""
    env = dict(os.environ if environ is None else environ)
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
    if not any(t.startswith("glibc.malloc.hugetlb=") for t in tunables):
        tunables.append(HUGE_PAGE_TUNABLE)
    env["GLIBC_TUNABLES"] = ":".join(tunables)
    return env


def collapse_to_huge_pages(maps: str = "/proc/self/maps") -> int:
    """Back this process's writable anonymous memory by huge pages where it is 2 MiB aligned;
    returns the bytes collapsed (0 where the kernel has no transparent huge pages). Done once
    in the zygote after ``prepare``: each fork then copies one entry per 2 MiB, not 512."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    collapsed = 0
    with open(maps) as lines:
        regions = [line.split() for line in lines]
    for fields in regions:
        anonymous = len(fields) == 5 or fields[5] == "[heap]"
        if fields[1] != "rw-p" or not anonymous:
            continue
        start, end = (int(bound, 16) for bound in fields[0].split("-"))
        start = -(-start // HUGE_PAGE) * HUGE_PAGE
        end = end // HUGE_PAGE * HUGE_PAGE
        if end - start < HUGE_PAGE:
            continue
        madvise(start, end - start, _MADV_HUGEPAGE)
        if madvise(start, end - start, _MADV_COLLAPSE) == 0:
            collapsed += end - start
    return collapsed


def _on_child(signum: int, frame: Any) -> None:
    """SIGCHLD: nothing to do here; its wake-up byte makes the zygote's loop reap."""


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def lower_priority(niceness: int) -> None:
    """Run this process (its one thread, and every thread it starts later) at ``niceness``,
    unless it already runs at a lower priority: an actor never outranks its zygote."""
    if niceness > os.getpriority(os.PRIO_PROCESS, 0):
        os.setpriority(os.PRIO_PROCESS, 0, niceness)


def _restore(program: ActorProgram, request: dict[str, Any]) -> tuple[Any, bool]:
    state = load_checkpoint(request["checkpoint_dir"], request["actor"])
    if state is not None:
        return state, True
    return program.start(request["actor"], int(request.get("seed", 0))), False


class _Clients:
    """An actor's buffer clients, one per service address, made on first use: the parameter
    fetch and the delivery to the same service share one ZeroMQ context and connection."""

    def __init__(self) -> None:
        self.open: dict[str, Any] = {}

    def get(self, address: str) -> Any:
        if address not in self.open:
            from workers.buffers.service import BufferClient

            self.open[address] = BufferClient(address)
        return self.open[address]

    def close(self) -> None:
        for client in self.open.values():
            client.close()
        self.open.clear()


def _params(request: dict[str, Any], clients: _Clients) -> tuple[int, Any]:
    source = request.get("params")
    if not source:
        return 0, None
    version, params = clients.get(source["address"]).get_object(source["buffer"], source["key"])
    return int(version), params


def _deliver(request: dict[str, Any], batch: dict[str, Any], clients: _Clients) -> None:
    sink = request.get("sink") or {}
    if "cache" in sink:
        from workers.buffers.shm import CacheWriter

        writer = CacheWriter(sink["cache"], request["actor"])
        try:
            writer.write(batch)
        finally:
            writer.close()
    elif "address" in sink:
        clients.get(sink["address"]).put(sink["buffer"], request["actor"], batch)


def _invocation(
    program: ActorProgram,
    request: dict[str, Any],
    control: socket.socket,
    wait_for_go: Callable[[], float | None] | None,
    clients: _Clients,
    state: Any,
) -> tuple[int, Any]:
    """One invocation: restore (unless the state is still in memory), report ready, wait for
    the go of a pre-warmed actor, sample, deliver, checkpoint. Returns the exit code and the
    actor's state."""
    actor = request["actor"]
    try:
        if request.get("cores"):
            os.sched_setaffinity(0, request["cores"])
        started = time.monotonic()
        kept_warm = state is not None
        restored = True
        if not kept_warm:
            state, restored = _restore(program, request)
        ready = time.monotonic()
        send(
            control,
            {
                "event": "ready",
                "actor": actor,
                "pid": os.getpid(),
                "at": ready,
                "restored": restored,
                "kept_warm": kept_warm,
                "restore_s": ready - started,
                "cores": sorted(os.sched_getaffinity(0)),
                "niceness": os.getpriority(os.PRIO_PROCESS, 0),
            },
        )
        go_at: float | None = ready
        if wait_for_go is not None:  # pre-warmed: wait for the go (new parameters published)
            go_at = wait_for_go()
            if go_at is None:
                return 3, state  # the zygote went away
        version, params = _params(request, clients)
        state, batch = program.sample(state, params, int(request["steps"]))
        _deliver(request, batch, clients)
        send(
            control,
            {
                "event": "sampled",
                "actor": actor,
                "steps": int(request["steps"]),
                "params_version": version,
                "go_at": go_at,
                "at": time.monotonic(),
            },
        )
        size = save_checkpoint(request["checkpoint_dir"], actor, state)
        send(
            control,
            {"event": "checkpointed", "actor": actor, "bytes": size, "at": time.monotonic()},
        )
        return 0, state
    except Exception as error:
        send(
            control,
            {
                "event": "failed",
                "actor": actor,
                "error": f"{type(error).__name__}: {error}",
                "trace": traceback.format_exc()[-2000:],
                "at": time.monotonic(),
            },
        )
        return 1, state


def _go_line(line: bytes) -> float | None:
    return float(json.loads(line)["go_at"]) if line else None


def run_actor(
    program: ActorProgram,
    request: dict[str, Any],
    control: socket.socket,
    go_fd: int | None,
    link: socket.socket | None = None,
) -> int:
    """The forked actor's whole life; returns its exit code.

    Without a ``link`` it serves one invocation. With one (``keep_warm_s``), after each
    checkpoint it tells the zygote it is parked and waits on the link for its next request
    (its state still in memory, its buffer connection still open), until the zygote closes
    the link."""
    clients = _Clients()
    wait_for_go: Callable[[], float | None] | None = None
    if go_fd is not None:

        def wait_for_go() -> float | None:
            with os.fdopen(go_fd, "rb") as go:
                return _go_line(go.readline())

    try:
        code, state = _invocation(program, request, control, wait_for_go, clients, None)
        if link is None:
            return code
        requests = link.makefile("rb")
        while code == 0:
            link.sendall(b"parked\n")
            line = requests.readline()
            if not line:
                return 0  # retired: its checkpoint is what remains
            request = json.loads(line)
            waits = bool(request.pop("wait_for_go", False))
            wait_for_go = (lambda: _go_line(requests.readline())) if waits else None
            code, state = _invocation(program, request, control, wait_for_go, clients, state)
        return code
    finally:
        clients.close()


@dataclass
class _Warm:
    """A keep-warm actor process: its link, and since when it is parked (None: running)."""

    pid: int
    link: socket.socket
    keep_warm_s: float
    parked_at: float | None = None


class Zygote:
    """The fork server's loop (single-threaded)."""

    def __init__(self, program: ActorProgram, control: socket.socket) -> None:
        self.program, self.control = program, control
        self.children: dict[int, str] = {}  # pid -> actor
        self.go_pipes: dict[str, int] = {}  # actor -> write end of its go pipe
        self.warm: dict[str, _Warm] = {}  # actor -> its keep-warm process
        self.quiet: set[int] = set()  # ended keep-warm processes whose exit was reported
        self.wake_read = self.wake_write = -1  # the SIGCHLD wake-up pipe, once serving

    def _running(self, actor: str) -> bool:
        warm = self.warm.get(actor)
        return any(
            name == actor and pid not in self.quiet and not (warm and warm.pid == pid)
            for pid, name in self.children.items()
        ) or bool(warm and warm.parked_at is None)

    def fork_actor(self, request: dict[str, Any], wait_for_go: bool) -> None:
        actor = request["actor"]
        warm = self.warm.get(actor)
        if self._running(actor):
            send(
                self.control,
                {
                    "event": "failed",
                    "actor": actor,
                    "error": "actor: already running",
                    "at": time.monotonic(),
                },
            )
            return
        if warm is not None:  # parked: the next request goes down its link, no fork
            warm.parked_at = None
            warm.link.sendall(json.dumps({**request, "wait_for_go": wait_for_go}).encode() + b"\n")
            send(
                self.control,
                {
                    "event": "forked",
                    "actor": actor,
                    "pid": warm.pid,
                    "kept_warm": True,
                    "at": time.monotonic(),
                },
            )
            return
        keep_warm_s = float(request.get("keep_warm_s") or 0.0)
        links = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) if keep_warm_s else None
        read_end = None
        if wait_for_go:
            read_end, write_end = os.pipe()
            self.go_pipes[actor] = write_end
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for fd in self.go_pipes.values():  # write ends: the zygote's alone
                    os.close(fd)
                for other in self.warm.values():  # so a retired actor sees its link close
                    other.link.close()
                if links is not None:
                    links[0].close()
                signal.set_wakeup_fd(-1)  # the zygote's wake-up pipe is the zygote's
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (self.wake_read, self.wake_write):
                    if fd >= 0:
                        os.close(fd)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                lower_priority(int(request.get("niceness") or 0))
                link = None if links is None else links[1]
                code = run_actor(self.program, request, self.control, read_end, link)
            finally:
                os._exit(code)
        if read_end is not None:
            os.close(read_end)
        if links is not None:
            links[1].close()
            self.warm[actor] = _Warm(pid, links[0], keep_warm_s)
        self.children[pid] = actor
        send(self.control, {"event": "forked", "actor": actor, "pid": pid, "at": time.monotonic()})

    def go(self, actor: str, go_at: float) -> None:
        line = json.dumps({"go_at": go_at}).encode() + b"\n"
        fd = self.go_pipes.pop(actor, None)
        warm = self.warm.get(actor)
        if fd is None and warm is not None and warm.parked_at is None:
            warm.link.sendall(line)  # a kept-warm actor waits for its go on its link
            return
        if fd is None:
            send(
                self.control,
                {
                    "event": "failed",
                    "actor": actor,
                    "error": "go: actor is not pre-warmed",
                    "at": time.monotonic(),
                },
            )
            return
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def kill(self, actor: str) -> None:
        for pid, name in self.children.items():
            if name == actor:
                os.kill(pid, signal.SIGKILL)

    def _retire(self, actor: str) -> None:
        """Close a keep-warm actor's link: parked, it exits (its exit already reported)."""
        warm = self.warm.pop(actor)
        if warm.parked_at is not None:
            self.quiet.add(warm.pid)
        warm.link.close()

    def read_links(self, readable: list[Any], now: float) -> None:
        """A keep-warm actor that parked has ended its invocation: reported as exited (code 0)
        here, since its process lives on; a link that closed is a process that died."""
        for actor, warm in list(self.warm.items()):
            if warm.link not in readable:
                continue
            data = warm.link.recv(MAX_PACKET)
            if not data:
                self.warm.pop(actor)
                warm.link.close()
                continue
            warm.parked_at = now
            self.quiet.discard(warm.pid)
            send(
                self.control,
                {
                    "event": "exited",
                    "actor": actor,
                    "pid": warm.pid,
                    "code": 0,
                    "kept_warm": True,
                    "at": time.monotonic(),
                },
            )

    def retire_idle(self, now: float) -> None:
        for actor, warm in list(self.warm.items()):
            if warm.parked_at is not None and now - warm.parked_at >= warm.keep_warm_s:
                self._retire(actor)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            actor = self.children.pop(pid, None)
            if actor is None:
                continue
            warm = self.warm.get(actor)
            if warm is not None and warm.pid == pid:
                parked = warm.parked_at is not None
                self.warm.pop(actor)
                warm.link.close()
                if parked:  # killed while parked: its invocation's exit was reported
                    continue
            if pid in self.quiet:
                self.quiet.discard(pid)
                continue
            fd = self.go_pipes.pop(actor, None)
            if fd is not None:
                os.close(fd)
            send(
                self.control,
                {
                    "event": "exited",
                    "actor": actor,
                    "pid": pid,
                    "code": os.waitstatus_to_exitcode(status),
                    "at": time.monotonic(),
                },
            )

    def _next_retirement(self, now: float) -> float | None:
        """Seconds until the first parked actor is due to retire; None when none is parked."""
        due = [w.parked_at + w.keep_warm_s for w in self.warm.values() if w.parked_at is not None]
        return max(0.0, min(due) - now) if due else None

    def serve(self) -> None:
        """Sleep until a request, a parked actor's message, an actor's exit (SIGCHLD, written
        to a wake-up pipe) or the next retirement; no polling while nothing happens."""
        self.wake_read, self.wake_write = os.pipe()
        for fd in (self.wake_read, self.wake_write):
            os.set_blocking(fd, False)
        signal.signal(signal.SIGCHLD, _on_child)  # a handler: SIG_IGN would reap by itself
        signal.set_wakeup_fd(self.wake_write)
        while True:
            waited: list[Any] = [self.control, self.wake_read]
            waited += [warm.link for warm in self.warm.values()]
            timeout = self._next_retirement(time.monotonic())
            readable, _, _ = select.select(waited, [], [], timeout)
            if self.wake_read in readable:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self.wake_read, 4096):
                        pass
            now = time.monotonic()
            self.read_links(readable, now)  # before any request: a parked actor is reused
            self.retire_idle(now)
            self.reap()
            if self.control not in readable:
                continue
            packet = self.control.recv(MAX_PACKET)
            if not packet:
                break  # the manager went away
            request = json.loads(packet)
            op = request.get("op")
            if op == "exit":
                break
            if op in ("prewarm", "invoke"):
                self.fork_actor(request, wait_for_go=op == "prewarm")
            elif op == "go":
                self.go(request["actor"], float(request["go_at"]))
            elif op == "kill":
                self.kill(request["actor"])
        for actor in list(self.warm):
            self._retire(actor)
        for pid in list(self.children):
            os.kill(pid, signal.SIGKILL)
        while self.children:
            self.reap()
            time.sleep(0.001)


def preload_actor_modules() -> None:
    """Import, once in the zygote, what every actor imports to fetch parameters and deliver
    its batch (the buffer client and ZeroMQ, the shared-memory cache writer), so a forked
    actor does not pay those imports on each invocation. No ZeroMQ context is created here:
    each child makes its own after the fork."""
    import workers.buffers.service
    import workers.buffers.shm  # noqa: F401


def cold_start(program_path: str, request: dict[str, Any]) -> dict[str, Any]:
    """The baseline: imports, prepare and restore in this fresh interpreter."""
    program = load_program(program_path)
    program.prepare()
    if request.get("cores"):
        os.sched_setaffinity(0, request["cores"])
    started = time.monotonic()
    _restore(program, request)
    ready = time.monotonic()
    return {"event": "ready", "at": ready, "restore_s": ready - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.actors.zygote")
    parser.add_argument("--program", required=True, help="module:attribute of the actor program")
    parser.add_argument("--fd", type=int, help="SOCK_SEQPACKET socket to the pool manager")
    parser.add_argument("--cold", help="JSON request: cold-start one actor and print ready")
    args = parser.parse_args(argv)
    if args.cold:
        print(json.dumps(cold_start(args.program, json.loads(args.cold))), flush=True)
        return 0
    if args.fd is None:
        parser.error("--fd is required unless --cold")
    serve_program(args.program, socket.socket(fileno=args.fd))
    return 0


def serve_program(program_path: str, control: socket.socket, collapse: bool = True) -> None:
    """The zygote's life: prepare the program once, report ``prepared``, serve the pool
    manager's requests until it sends ``exit`` or goes away. ``collapse``: move the heap
    into huge pages first (cheap in a fresh interpreter, whose heap malloc already placed
    in them; a forked zygote's heap is its parent's, shared copy-on-write, and collapsing it
    copies all of it)."""
    started = time.monotonic()
    program = load_program(program_path)
    program.prepare()
    preload_actor_modules()
    gc.freeze()  # the prepared heap stays out of the children's collections: fewer COW copies
    huge_page_bytes = collapse_to_huge_pages() if collapse else 0
    send(
        control,
        {
            "event": "prepared",
            "pid": os.getpid(),
            "prepare_s": time.monotonic() - started,
            "huge_page_bytes": huge_page_bytes,
            "at": time.monotonic(),
        },
    )
    Zygote(program, control).serve()


if __name__ == "__main__":
    sys.exit(main())
