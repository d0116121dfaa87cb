"""Per-action sandboxes of the local backend: bubblewrap, and an unprivileged *host* uid.

Why this construction (each property is checked from the host's side, ``/proc/<pid>/status``):

- **Root agent ("drop" mode).** ``bwrap`` runs as real root *without* a user namespace, builds
  fresh mount, pid, ipc, uts, cgroup and net namespaces around a tmpfs root holding only what is
  listed below, then execs ``setpriv --reuid U --regid G --clear-groups --inh-caps=-all
  --bounding-set=-all --no-new-privs`` which becomes the dedicated sandbox user before the
  command starts. A user namespace is avoided on purpose: one created by
  root maps the sandbox's uid onto host root, so the kernel would still see root outside. Here the
  host sees uid U ≠ 0 with no effective, permitted, inheritable, ambient or bounding capabilities
  and ``NoNewPrivs: 1``. The pid namespace's init (bwrap itself) stays uid 0 but capability-less;
  a process of uid U can neither signal nor ptrace it, nor open its ``/proc/1/root`` or
  ``environ``. Where the host lets unprivileged users create user namespaces, the command then
  runs under a second, unprivileged ``bwrap --unshare-user --disable-userns`` (same uid on the
  host, everything else as is): a sandbox cannot make user namespaces of its own, the kernel
  surface behind which most container escapes have been found. Where the host forbids them, the
  sandbox user cannot make any anyway; the start-up self-test checks it either way.
- **Non-root agent ("userns" mode).** ``bwrap --unshare-user --disable-userns`` as the agent's
  own (non-root) uid: the host sees that uid, no capabilities survive outside the namespace and no
  further user namespace can be made inside. Needs unprivileged user namespaces; the start-up
  self-test tells.

The sandbox user is the ``loom-sandbox`` system account, created with ``useradd --system`` when
missing (root only), so its uid comes from the system range and belongs to nothing else; an
operator may name another account or a numeric ``uid:gid``. Inside, ``/etc/passwd`` and
``/etc/group`` are generated and list only root and that user: host account names do not leak.

Filesystem, both modes: ``/usr`` (and ``/bin``, ``/sbin``, ``/lib*`` as the links or directories
they are on the host) read-only; from ``/etc`` only what programs need to start (loader cache,
alternatives, TLS roots, time zone, name resolution) — no shadow, no host secrets; a fresh
``/proc`` of the sandbox's own pid namespace; a minimal ``/dev`` with a private ``/dev/shm``
(POSIX semaphores); a private tmpfs ``/tmp`` (its pages count against the action's memory
cgroup); the trajectory's directory read-write at ``/workdir`` (the cwd, ``HOME`` and
``LOOM_WORKDIR``); and tool runtimes an operator names (a Python virtualenv and its base
interpreter) read-only at their own paths — never a directory holding Loom's repository, ``var/``
or the working directories. Nothing else of the host exists in the sandbox, so Loom's keys, its
database file and other trajectories' directories cannot even be named.

Network: every action gets a network namespace of its own. A tool with ``network`` off has
loopback only. With it on, ``slirp4netns`` connects it to the outside (``sandbox_network.py``):
it relays the action's connections as ordinary sockets of the agent's, and with
``--disable-host-loopback`` it refuses the host's loopback, so the services bound there (the
database, Redis) stay out of reach; DNS goes to slirp's resolver (``10.0.2.3``). An nftables
ruleset in the action's namespace (``sandbox_egress.py``) also rejects the host's other
addresses, private and link-local networks (cloud metadata included) unless the operator allows
some in ``LOOM_SANDBOX_NETWORK_ALLOW``; without ``nft`` network-on actions fail. Without
``slirp4netns`` a network-on action fails (``infra_error``, naming the package) — fail closed —
unless the operator set ``LOOM_SANDBOX_HOST_NETWORK=1``: then such actions share the host's
network, its loopback services included, and the agent says so loudly at start. Like the
insecure flag, it only applies where ``slirp4netns`` is missing; it never replaces working
user-mode networking.

Without a working sandbox the agent refuses to start (``open_sandbox``). The operator's insecure
flag only permits running unsandboxed *where no sandbox works*; it never turns a working one off.

Kill paths stay the backend's: its wrapper joins the action's cgroup before it execs bwrap, so
every sandboxed process is in the cgroup; they are visible in the host's ``/proc`` with their
``LOOM_ACTION`` marker (the affinity fallback's scan); and ``--die-with-parent`` plus the pid
namespace mean that killing the outer bwrap (the process group leader) ends everything inside.
No ``--new-session``: the action already runs in a session of its own without a terminal, and a
new session inside would take the sandbox out of the process group the backend kills.
The ``slirp4netns`` of a network-on action runs as the agent's user outside the sandbox (it must
enter the namespace; as root with ``--enable-sandbox``: an empty root of its own and no
capabilities but binding low ports; both modes with its seccomp filter) and within the action's
limits: it joins the action's cgroup (cores, memory; one process, started before the command, so
a fork bomb cannot crowd it out) or its affinity, carries its marker, is killed and reaped by the
backend when the action ends, whatever ends it, and exits by itself when the agent dies
(``--exit-fd``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from workers.agents.cpu.sandbox_egress import NFT_HINT, EgressFilter
from workers.agents.cpu.sandbox_network import NETWORK_DNS, UserNetwork

logger = logging.getLogger(__name__)

INSECURE_VARIABLE = "LOOM_INSECURE_UNSANDBOXED_ACTIONS"
HOST_NETWORK_VARIABLE = "LOOM_SANDBOX_HOST_NETWORK"
DEFAULT_USER = "loom-sandbox"
WORKDIR = "/workdir"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
NETWORK_HINT = "install slirp4netns (Debian/Ubuntu: apt-get install slirp4netns)"
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_ENTRIES = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "pki",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
    "timezone",
)
_SELF_TEST_TIMEOUT_S = 20.0


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run here; the message names the fix."""


@dataclass(frozen=True)
class SandboxUser:
    uid: int
    gid: int
    name: str


def _flag_from_env(variable: str) -> bool:
    return os.environ.get(variable, "").strip().lower() in ("1", "true", "yes", "on")


def insecure_from_env() -> bool:
    """Whether the operator set ``LOOM_INSECURE_UNSANDBOXED_ACTIONS`` to a true value."""
    return _flag_from_env(INSECURE_VARIABLE)


def host_network_from_env() -> bool:
    """Whether the operator set ``LOOM_SANDBOX_HOST_NETWORK`` to a true value."""
    return _flag_from_env(HOST_NETWORK_VARIABLE)


def resolve_user(spec: str = DEFAULT_USER) -> SandboxUser:
    """``uid[:gid]`` or an account name; the default account is created when missing (root)."""
    if spec.replace(":", "").isdigit():
        uid_text, _, gid_text = spec.partition(":")
        uid = int(uid_text)
        user = SandboxUser(uid, int(gid_text or uid_text), DEFAULT_USER)
    else:
        try:
            entry = pwd.getpwnam(spec)
        except KeyError:
            entry = _create_account(spec)
        user = SandboxUser(entry.pw_uid, entry.pw_gid, spec)
    if user.uid == 0 or user.gid == 0:
        raise SandboxUnavailable(f"sandbox user {spec!r} is root: name an unprivileged account")
    return user


def _create_account(name: str) -> pwd.struct_passwd:
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    if os.geteuid() != 0 or not os.path.exists(useradd):
        raise SandboxUnavailable(f"no account {name!r}; create it (useradd --system {name})")
    command = [useradd, "--system", "--user-group", "--no-create-home"]
    command += ["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    try:  # a concurrent agent may have created it first (useradd then exits 9)
        return pwd.getpwnam(name)
    except KeyError:
        raise SandboxUnavailable(f"cannot create account {name!r}: {done.stderr.strip()}") from None


def _check_runtime_binds(binds: Iterable[Path], protected: Iterable[Path]) -> tuple[Path, ...]:
    """Absolute, existing, and never ``/``, the work directory's mount point or an ancestor of
    something the sandbox must not see (Loom's repository, ``var/``, the working directories)."""
    checked = []
    guarded = [Path(p).resolve() for p in protected]
    for raw in binds:
        path = Path(raw)
        if not path.is_absolute() or not path.exists():
            raise SandboxUnavailable(f"read-only bind {raw}: not an existing absolute path")
        resolved = path.resolve()
        if resolved == Path("/") or Path(WORKDIR).is_relative_to(resolved):
            raise SandboxUnavailable(f"read-only bind {raw} would cover the whole sandbox")
        if resolved.is_relative_to(WORKDIR):
            raise SandboxUnavailable(f"read-only bind {raw} lies under {WORKDIR}")
        for secret in guarded:
            if secret.is_relative_to(resolved):
                raise SandboxUnavailable(f"read-only bind {raw} would expose {secret}")
        if not resolved.is_relative_to("/usr") and path not in checked:
            checked.append(path)
    return tuple(checked)


def python_runtime_binds() -> tuple[Path, ...]:
    """This interpreter's virtualenv and base installation (outside /usr): what a tool needs to
    run the same Python with the same packages inside a sandbox."""
    import sys

    prefixes = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent}
    outside = [p for p in prefixes if not p.resolve().is_relative_to("/usr")]
    return tuple(
        sorted(p for p in outside if not any(p != q and p.is_relative_to(q) for q in outside))
    )


class Sandbox:
    """A bubblewrap sandbox checked at start-up; wraps each action's argv (module docstring)."""

    def __init__(
        self,
        *,
        user: str = DEFAULT_USER,
        ro_binds: Sequence[Path] = (),
        protected: Sequence[Path] = (),
        bwrap: str | None = None,
        slirp4netns: str | Literal["auto"] | None = "auto",
        host_network: bool | None = None,
    ) -> None:
        """``slirp4netns``: its path, ``"auto"`` to look for it, ``None``: unavailable.
        ``host_network``: network-on actions share the host's network where slirp4netns is
        unavailable (default: ``LOOM_SANDBOX_HOST_NETWORK``); otherwise they fail."""
        found = bwrap or shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailable("bwrap not found")
        self.bwrap = found
        self.root = os.geteuid() == 0
        self.user = resolve_user(user) if self.root else None
        self.setpriv = shutil.which("setpriv", path=DEFAULT_PATH)
        self.prlimit = shutil.which("prlimit", path=DEFAULT_PATH)
        if self.root and (self.setpriv is None or self.prlimit is None):
            raise SandboxUnavailable("setpriv/prlimit (util-linux) not found under /usr")
        self.ro_binds = _check_runtime_binds(ro_binds, protected)
        self.block_userns = self.root  # drop mode: nest an unprivileged bwrap (module docstring)
        if slirp4netns == "auto":
            slirp4netns = shutil.which("slirp4netns", path=DEFAULT_PATH)
        self.slirp4netns = slirp4netns
        allowed = host_network_from_env() if host_network is None else host_network
        self.host_network = slirp4netns is None and allowed
        if self.host_network:
            logger.critical(
                "!!! INSECURE: actions of network-enabled tools share the HOST's network, "
                "services on its loopback (database, Redis) included (%s is set and slirp4netns "
                "is missing: %s) !!!",
                HOST_NETWORK_VARIABLE,
                NETWORK_HINT,
            )
        elif slirp4netns is None:
            logger.warning("actions of network-enabled tools will fail: %s", NETWORK_HINT)
        try:
            self.egress = EgressFilter.from_environment(dns=NETWORK_DNS, search_path=DEFAULT_PATH)
        except ValueError as exc:
            raise SandboxUnavailable(str(exc)) from None
        if slirp4netns is not None and not self.egress.available:
            logger.warning("actions of network-enabled tools will fail: %s", NFT_HINT)
        self._etc = self._etc_directory()
        # The same for every action: built once, not on each action's spawn path.
        self._filesystem = {resolver: self._filesystem_args(resolver) for resolver in (False, True)}

    @property
    def mode(self) -> str:
        """``drop`` (root bwrap, then setpriv to the sandbox user) or ``userns``."""
        return "drop" if self.root else "userns"

    @property
    def network_mode(self) -> str:
        """What network-on actions get: ``slirp4netns``, ``host`` (insecure) or ``refused``."""
        if self.slirp4netns is not None:
            return "slirp4netns" if self.egress.available else "refused"
        return "host" if self.host_network else "refused"

    @property
    def host_uid(self) -> int:
        """The uid the host sees for sandboxed processes."""
        return self.user.uid if self.user is not None else os.geteuid()

    def _etc_files(self) -> dict[str, str]:
        """The accounts, and the resolver of actions on slirp4netns's network."""
        uid, gid = self.host_uid, self.user.gid if self.user else os.getegid()
        name = self.user.name if self.user else DEFAULT_USER
        return {
            "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"{name}:x:{uid}:{gid}::{WORKDIR}:/bin/sh\n",
            "group": f"root:x:0:\n{name}:x:{gid}:\n",
            "resolv.conf": f"nameserver {NETWORK_DNS}\n",
        }

    def _etc_directory(self) -> Path:
        """The generated ``/etc`` files, one directory per content in a private directory of this
        uid: every sandbox (and agent process) with the same files shares it, so agents that die
        without closing leave nothing new behind."""
        private = Path(tempfile.gettempdir()) / f"loom-sandbox-{os.geteuid()}"
        private.mkdir(mode=0o700, exist_ok=True)
        owner = private.lstat()
        if private.is_symlink() or owner.st_uid != os.geteuid() or owner.st_mode & 0o077:
            raise SandboxUnavailable(f"{private} is not a private directory of this user")
        files = self._etc_files()
        digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
        etc = private / f"etc-{digest}"
        if etc.is_dir():
            return etc
        staging = Path(tempfile.mkdtemp(prefix="etc-staging-", dir=private))
        for name, text in files.items():
            (staging / name).write_text(text)
            (staging / name).chmod(0o644)
        staging.chmod(0o755)
        try:
            staging.rename(etc)
        except OSError:  # another process made it meanwhile: same content
            shutil.rmtree(staging, ignore_errors=True)
        return etc

    def _filesystem_args(self, resolver: bool) -> list[str]:
        """bwrap's mounts of the host's system directories, the generated ``/etc`` (with
        slirp4netns's ``resolv.conf`` when ``resolver``), private ``/tmp`` and the runtimes."""
        args = ["--ro-bind", "/usr", "/usr"]
        for directory in _SYSTEM_DIRS:
            if os.path.islink(directory):
                args += ["--symlink", os.readlink(directory), directory]
            elif os.path.isdir(directory):
                args += ["--ro-bind", directory, directory]
        args += ["--dir", "/etc"]
        generated = ["passwd", "group"] + (["resolv.conf"] if resolver else [])
        for entry in _ETC_ENTRIES:
            if entry not in generated:
                args += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
        for name in generated:
            args += ["--ro-bind", str(self._etc / name), f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm"]
        args += ["--perms", "1777", "--tmpfs", "/tmp"]  # bwrap's defaults: root's, mode 0755
        args += ["--dir", "/var", "--symlink", "../tmp", "/var/tmp"]
        made: set[Path] = set()
        for path in self.ro_binds:
            for parent in reversed(path.parents[:-1]):  # bwrap would make them 0700
                if parent not in made:
                    made.add(parent)
                    args += ["--perms", "0755", "--dir", str(parent)]
            args += ["--ro-bind", str(path), str(path)]
        return args

    def user_network(self) -> UserNetwork | None:
        """The network of one network-on action: its own, through slirp4netns; ``None`` where
        the operator chose the host's (``host_network``). Raises where neither is possible."""
        if self.slirp4netns is not None:
            if not self.egress.available:
                raise SandboxUnavailable(
                    f"this tool has network on, but nft is not installed on this node, and "
                    f"without it the action could reach the host and its private networks. "
                    f"Fix: {NFT_HINT}"
                )
            return UserNetwork(self.slirp4netns, join_userns=not self.root, egress=self.egress)
        if self.host_network:
            return None
        raise SandboxUnavailable(
            f"this tool has network on, but slirp4netns is not installed on this node, and "
            f"without it the sandbox would share the host's network, services on its loopback "
            f"included. Fix: {NETWORK_HINT}; or, knowing that such actions then reach those "
            f"services, set {HOST_NETWORK_VARIABLE}=1 on the agent"
        )

    def own(self, directory: Path) -> None:
        """Hand a working directory to the sandbox user, private to it."""
        if self.user is not None:
            os.chown(directory, self.user.uid, self.user.gid)
        directory.chmod(0o700)

    def wrap(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        network: bool,
        nproc: int | None = None,
        user_network: UserNetwork | None = None,
    ) -> list[str]:
        """``argv`` run in a sandbox around ``workdir``; ``nproc``: an RLIMIT_NPROC for the
        sandbox user, for hosts without a pids cgroup (it counts all the user's processes).
        ``network`` on: ``user_network`` connects the sandbox (``user_network()``; the caller
        then spawns with its ``pass_fds`` and calls its ``start``)."""
        if network and user_network is None and not self.host_network:
            raise SandboxUnavailable("network on without a user network: refusing the host's")
        args = [self.bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
        args += ["--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
        if not network or user_network is not None:
            args.append("--unshare-net")
        if user_network is not None:
            args += user_network.bwrap_args()
        if not self.root:
            args += ["--unshare-user", "--disable-userns"]
            args += ["--uid", str(os.geteuid()), "--gid", str(os.getegid())]
        args += self._filesystem[user_network is not None]
        args += ["--bind", str(workdir), WORKDIR, "--chdir", WORKDIR, "--"]
        if self.user is not None:
            assert self.setpriv is not None and self.prlimit is not None
            if nproc is not None:
                args += [self.prlimit, f"--nproc={nproc}", "--"]
            args += [self.setpriv, f"--reuid={self.user.uid}", f"--regid={self.user.gid}"]
            args += ["--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
            args += ["--no-new-privs", "--"]
            if self.block_userns:
                ids = ["--uid", str(self.user.uid), "--gid", str(self.user.gid)]
                args += [self.bwrap, "--die-with-parent", "--unshare-user", "--disable-userns"]
                args += [*ids, "--dev-bind", "/", "/", "--chdir", WORKDIR, "--"]
        return [*args, *argv]

    def self_test(self) -> None:
        """Run one sandboxed command and check, from inside, what the host will see: a non-root
        uid, no capabilities, no_new_privs, a writable working directory."""
        scratch = Path(tempfile.mkdtemp(prefix="loom-sandbox-test-"))
        try:
            self.own(scratch)
            probe = "cat /proc/self/status && touch probe && echo workdir-ok"
            probe += "; if unshare -U true 2>/dev/null; then echo userns-open; fi"
            argv = self.wrap(["/bin/sh", "-c", probe], workdir=scratch, network=False)
            try:
                done = subprocess.run(
                    argv,
                    env={"PATH": DEFAULT_PATH},
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=_SELF_TEST_TIMEOUT_S,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SandboxUnavailable(f"bwrap self-test did not run: {exc}") from None
            if done.returncode != 0:
                detail = (done.stderr or done.stdout).strip()[-500:]
                raise SandboxUnavailable(f"bwrap self-test failed ({done.returncode}): {detail}")
            status = dict(
                line.split(":\t", 1) for line in done.stdout.splitlines() if ":\t" in line
            )
            uids = status.get("Uid", "0").split()
            if "0" in uids or int(status.get("CapEff", "1"), 16) != 0:
                raise SandboxUnavailable(f"sandboxed probe kept privileges: {status}")
            if status.get("NoNewPrivs", "0").strip() != "1" or "workdir-ok" not in done.stdout:
                raise SandboxUnavailable(f"sandboxed probe incomplete: {done.stdout[-500:]}")
            if "userns-open" in done.stdout:
                raise SandboxUnavailable("a sandboxed process could create user namespaces")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def close(self) -> None:
        """Nothing to release: the generated ``/etc`` is shared (``_etc_directory``)."""


def open_sandbox(
    *,
    insecure: bool | None = None,
    user: str = DEFAULT_USER,
    ro_binds: Sequence[Path] = (),
    protected: Sequence[Path] = (),
) -> Sandbox | None:
    """The checked sandbox every local action must run in, or ``None`` only where the operator
    set the insecure flag (``LOOM_INSECURE_UNSANDBOXED_ACTIONS``) and no sandbox works.

    Without a sandbox any job key holder runs commands with the agent's privileges (as root: the
    whole host), so this refuses — for a non-root agent too, whose files (keys, database) would be
    just as readable — and names the fix.
    """
    allowed = insecure_from_env() if insecure is None else insecure
    sandbox: Sandbox | None = None
    try:
        sandbox = Sandbox(user=user, ro_binds=ro_binds, protected=protected)
        try:
            sandbox.self_test()
        except SandboxUnavailable:
            if not sandbox.block_userns:
                raise
            # No unprivileged user namespaces here: nothing to block, and the nested bwrap
            # cannot start; the self-test proves the sandbox user cannot make one either.
            sandbox.block_userns = False
            sandbox.self_test()
        logger.info(
            "actions run sandboxed (bwrap, %s mode, uid %d, nested bwrap: %s, network: %s)",
            sandbox.mode,
            sandbox.host_uid,
            sandbox.block_userns,
            sandbox.network_mode,
        )
        return sandbox
    except SandboxUnavailable as exc:
        if sandbox is not None:
            sandbox.close()
        if not allowed:
            raise SandboxUnavailable(
                f"refusing to run actions unsandboxed: {exc}. Fix: {INSTALL_HINT} "
                f"(bubblewrap must be able to create namespaces here); or, knowing that any job "
                f"key then runs commands with this agent's privileges, set "
                f"{INSECURE_VARIABLE}=1 (agent CLI: --insecure-unsandboxed-actions)"
            ) from None
        who = "ROOT" if os.geteuid() == 0 else f"uid {os.geteuid()}"
        logger.critical(
            "!!! INSECURE: actions run UNSANDBOXED as %s (%s is set; sandbox: %s). Any job key "
            "can read and change everything this agent can. !!!",
            who,
            INSECURE_VARIABLE,
            exc,
        )
        return None
