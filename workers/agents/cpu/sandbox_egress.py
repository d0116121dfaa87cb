"""Where a network-on action's connections may go: out, but never back to the host or its
neighbours (Loom's own rule).

slirp4netns relays an action's connections as ordinary sockets of the agent's, so without a
filter an action reaches whatever the agent's host reaches: the host's own non-loopback
addresses (a database or Redis bound to ``0.0.0.0``), the private networks the cluster lives on
(the control plane's PostgreSQL and Redis in a real deployment) and the cloud's metadata service
at ``169.254.169.254`` (the instance's credentials). ``--disable-host-loopback`` closes only
``127.0.0.0/8``. So before an action's command runs, the agent installs an nftables ruleset in the
action's own network namespace that rejects those destinations; the action, with every capability
dropped, cannot change it. An operator who means a tool to reach an internal service names its
networks in ``LOOM_SANDBOX_NETWORK_ALLOW`` (comma-separated CIDRs), which are accepted first.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

ALLOW_VARIABLE = "LOOM_SANDBOX_NETWORK_ALLOW"
NFT_HINT = "install nftables (Debian/Ubuntu: apt-get install nftables)"
# Private, shared, link-local (cloud metadata), "this network", multicast and reserved ranges.
BLOCKED_NETWORKS: tuple[str, ...] = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
)
_APPLY_TIMEOUT_S = 10.0
_ENTER_SCRIPT = Path(__file__).with_name("_enter_namespaces.py")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressUnavailable(RuntimeError):
    """The filter could not be installed; the action must not run with an open network."""


def parse_networks(text: str, *, source: str) -> tuple[Network, ...]:
    """Comma-separated CIDRs (a bare address is one host); ``ValueError`` names ``source``."""
    networks = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise ValueError(f"{source}: {item!r} is not an IP network ({exc})") from None
    return tuple(networks)


def allowed_from_env() -> tuple[Network, ...]:
    """The operator's exceptions, ``LOOM_SANDBOX_NETWORK_ALLOW``; a malformed entry raises."""
    return parse_networks(os.environ.get(ALLOW_VARIABLE, ""), source=ALLOW_VARIABLE)


def _hex_to_ipv6(text: str) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(bytes.fromhex(text))


def host_addresses(proc: Path = Path("/proc")) -> tuple[Network, ...]:
    """Every address the host owns, as single-host networks: IPv4 from the kernel's local
    routes (``/proc/net/fib_trie``, the ``/32 host LOCAL`` leaves), IPv6 from
    ``/proc/net/if_inet6``. Read at each action's start: addresses come and go."""
    found: set[Network] = set()
    try:
        lines = (proc / "net" / "fib_trie").read_text().splitlines()
    except OSError:
        lines = []
    for previous, line in itertools.pairwise(lines):
        if line.strip() == "/32 host LOCAL":
            candidate = previous.strip().removeprefix("|-- ").strip()
            try:
                found.add(ipaddress.ip_network(f"{candidate}/32"))
            except ValueError:
                continue
    try:
        inet6 = (proc / "net" / "if_inet6").read_text().splitlines()
    except OSError:
        inet6 = []
    for entry in inet6:
        fields = entry.split()
        if fields and len(fields[0]) == 32:
            found.add(ipaddress.ip_network(f"{_hex_to_ipv6(fields[0])}/128"))
    return tuple(
        sorted(
            (n for n in found if not n.network_address.is_loopback),
            key=lambda n: (n.version, int(n.network_address)),
        )
    )


def _set(networks: Iterable[Network], version: int) -> str:
    """An nftables anonymous set of one family's networks, overlaps merged (nft refuses
    overlapping intervals); empty when there are none."""
    same_family = [n for n in networks if n.version == version]
    members = [str(n) for n in ipaddress.collapse_addresses(same_family)]  # type: ignore[type-var]
    return "{ " + ", ".join(members) + " }" if members else ""


def ruleset(
    *,
    dns: str | Sequence[str],
    allowed: Sequence[Network],
    blocked: Sequence[Network],
    table: str = "loom_egress",
    replace: bool = False,
) -> str:
    """The nftables script for one action's namespace: its own loopback and the resolvers
    (``dns``: slirp's, or the ones a container's DNS forwards to; port 53) are accepted, then
    the operator's ``allowed``, then ``blocked`` is rejected (an immediate "administratively
    prohibited", not a silent drop the action would wait out); everything else goes out.
    ``replace``: swap out a table loaded earlier in the same transaction (a namespace that
    outlives one action, a Docker container's)."""
    lines = [f"add table inet {table}", f"delete table inet {table}"] if replace else []
    lines += [
        f"table inet {table} {{",
        "  chain output {",
        "    type filter hook output priority 0; policy accept;",
        '    oifname "lo" accept',
    ]
    for resolver in [dns] if isinstance(dns, str) else dns:
        family = "ip6" if ipaddress.ip_address(resolver).version == 6 else "ip"
        lines.append(
            f"    {family} daddr {resolver} meta l4proto {{ tcp, udp }} th dport 53 accept"
        )
    for family, version in (("ip", 4), ("ip6", 6)):
        members = _set(allowed, version)
        if members:
            lines.append(f"    {family} daddr {members} accept")
    for family, version in (("ip", 4), ("ip6", 6)):
        members = _set(blocked, version)
        if members:
            lines.append(f"    {family} daddr {members} reject with icmpx type admin-prohibited")
    lines += ["  }", "}", ""]
    return "\n".join(lines)


class EgressFilter:
    """Installs :func:`ruleset` into an action's network namespace before its command runs."""

    def __init__(
        self,
        *,
        nft: str | None,
        dns: str | Sequence[str],
        allowed: Sequence[Network] = (),
        replace: bool = False,
    ) -> None:
        self.nft = nft
        self.dns = dns
        self.allowed = tuple(allowed)
        self.replace = replace
        self.blocked_by_default = tuple(ipaddress.ip_network(n) for n in BLOCKED_NETWORKS)

    @classmethod
    def from_environment(cls, *, dns: str, search_path: str) -> EgressFilter:
        """``nft`` found on ``search_path`` (``None``: network-on actions are refused) and the
        operator's exceptions from the environment."""
        return cls(nft=shutil.which("nft", path=search_path), dns=dns, allowed=allowed_from_env())

    @property
    def available(self) -> bool:
        return self.nft is not None

    def script(self) -> str:
        blocked = (*self.blocked_by_default, *host_addresses())
        return ruleset(dns=self.dns, allowed=self.allowed, blocked=blocked, replace=self.replace)

    async def apply(self, network: int, *, owner: int | None) -> None:
        """Load the ruleset into the namespace held open as ``network``; ``owner``: the user
        namespace owning it, for an agent that is not root (it enters that one first and keeps
        ``CAP_NET_ADMIN`` there across the exec, ``_enter_namespaces.py``)."""
        if self.nft is None:
            raise EgressUnavailable(f"no nft to filter this action's network: {NFT_HINT}")
        fds = [network] if owner is None else [owner, network]
        argv = [sys.executable, "-I", "-S", str(_ENTER_SCRIPT), "--net", str(network)]
        if owner is not None:
            argv += ["--user", str(owner)]
        argv += ["--", self.nft, "-f", "-"]
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=fds,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        try:
            async with asyncio.timeout(_APPLY_TIMEOUT_S):
                _, stderr = await process.communicate(self.script().encode())
        except TimeoutError:
            process.kill()
            await process.wait()
            raise EgressUnavailable("nft did not load this action's egress rules in time") from None
        if process.returncode != 0:
            detail = stderr.decode(errors="replace").strip()[-500:]
            raise EgressUnavailable(
                f"nft could not load the egress rules: {detail or 'no message'}"
            )
