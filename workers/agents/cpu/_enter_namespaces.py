"""Enter a network namespace held open by descriptor, then exec a command there.

``python -I -S _enter_namespaces.py --net FD [--user FD] -- COMMAND...``: the agent's egress filter
(``sandbox_egress.py``) runs ``nft`` in an action's namespace through this. With ``--user`` (an
agent that is not root) it first enters the user namespace owning the network namespace, where it
holds every capability, and raises ``CAP_NET_ADMIN`` into its inheritable and ambient sets so
that the capability survives the exec of a program run by a non-root uid. It runs as a fresh,
single-threaded interpreter, standard library only, because the kernel refuses ``setns`` into a
user namespace from a multithreaded process.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CAP_NET_ADMIN = 12
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SystemExit(f"{what}: {os.strerror(errno)}")


def _keep_net_admin_across_exec() -> None:
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(header), data), "capget")
    data[0].inheritable |= 1 << CAP_NET_ADMIN
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_ADMIN, 0, 0), "ambient")


def main(argv: list[str]) -> None:
    if "--" not in argv:
        raise SystemExit("usage: --net FD [--user FD] -- COMMAND...")
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    pairs = dict(zip(options[::2], options[1::2], strict=True))
    if "--net" not in pairs or not command or set(pairs) - {"--net", "--user"}:
        raise SystemExit("usage: --net FD [--user FD] -- COMMAND...")
    if "--user" in pairs:
        _check(_libc.setns(int(pairs["--user"]), CLONE_NEWUSER), "setns(user)")
        _keep_net_admin_across_exec()
    _check(_libc.setns(int(pairs["--net"]), CLONE_NEWNET), "setns(net)")
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
