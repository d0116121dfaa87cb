"""The egress rules of network-on actions: what they block, what the operator allows, and that
they load into a real namespace, as root and through a user namespace as an unprivileged agent
would (``_enter_namespaces.py``). The end-to-end proofs from inside actions are in
``test_local_sandbox_network.py``."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.agents.cpu import sandbox_egress
from workers.agents.cpu.sandbox import DEFAULT_PATH
from workers.agents.cpu.sandbox_egress import (
    ALLOW_VARIABLE,
    EgressFilter,
    EgressUnavailable,
    host_addresses,
    parse_networks,
    ruleset,
)

NFT = shutil.which("nft", path=DEFAULT_PATH)
_FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        |-- 127.0.0.1
           /32 host LOCAL
     |-- 192.0.2.0
        /24 link UNICAST
     |-- 192.0.2.7
        /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 192.0.2.7
        /32 host LOCAL
"""
_IF_INET6 = """00000000000000000000000000000001 01 80 10 80       lo
fd000000000000000000000000000002 02 40 00 80     eth0
"""


def test_allowed_networks_parse_and_a_bad_entry_names_its_source() -> None:
    assert parse_networks(" 10.1.0.0/16, 203.0.113.9 ,,2001:db8::/32", source="X") == (
        ipaddress.ip_network("10.1.0.0/16"),
        ipaddress.ip_network("203.0.113.9/32"),
        ipaddress.ip_network("2001:db8::/32"),
    )
    with pytest.raises(ValueError, match="X: 'nope' is not an IP network"):
        parse_networks("10.0.0.0/8,nope", source="X")


def test_the_hosts_own_addresses_are_read_and_loopback_left_out(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "fib_trie").write_text(_FIB_TRIE)
    (tmp_path / "net" / "if_inet6").write_text(_IF_INET6)
    assert host_addresses(tmp_path) == (
        ipaddress.ip_network("192.0.2.7/32"),
        ipaddress.ip_network("fd00::2/128"),
    )
    assert host_addresses(tmp_path / "missing") == ()


def test_the_ruleset_accepts_dns_and_the_allowed_before_rejecting_and_merges_overlaps() -> None:
    script = ruleset(
        dns="10.0.2.3",
        allowed=parse_networks("10.9.0.0/16", source="allow"),
        blocked=parse_networks("10.0.0.0/8, 10.0.2.7, 192.0.2.7, fc00::/7, fd00::2", source="b"),
    )
    lines = [line.strip() for line in script.splitlines()]
    dns = lines.index("ip daddr 10.0.2.3 meta l4proto { tcp, udp } th dport 53 accept")
    allowed = lines.index("ip daddr { 10.9.0.0/16 } accept")
    rejected = lines.index(
        "ip daddr { 10.0.0.0/8, 192.0.2.7/32 } reject with icmpx type admin-prohibited"
    )
    assert lines.index('oifname "lo" accept') < dns < allowed < rejected
    assert "ip6 daddr { fc00::/7 } reject with icmpx type admin-prohibited" in lines


def test_by_default_private_link_local_and_the_hosts_addresses_are_blocked() -> None:
    egress = EgressFilter(nft="/usr/sbin/nft", dns="10.0.2.3")
    script = egress.script()
    for network in ("10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16"):
        assert network in script, script
    for own in host_addresses():
        same_family = [b for b in egress.blocked_by_default if b.version == own.version]
        if not any(own.subnet_of(b) for b in same_family):  # type: ignore[arg-type]
            assert str(own) in script, (own, script)


def test_the_allow_list_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_VARIABLE, "10.20.0.0/16")
    egress = EgressFilter.from_environment(dns="10.0.2.3", search_path=DEFAULT_PATH)
    assert egress.allowed == (ipaddress.ip_network("10.20.0.0/16"),)
    monkeypatch.setenv(ALLOW_VARIABLE, "10.20.0.0/33")
    with pytest.raises(ValueError, match=ALLOW_VARIABLE):
        EgressFilter.from_environment(dns="10.0.2.3", search_path=DEFAULT_PATH)


def _require_root_and_nft() -> str:
    if NFT is None:
        print("egress load test skipped: no nft")
        pytest.skip("nft is not installed (apt-get install nftables)")
    if os.geteuid() != 0:
        print("egress load test skipped: not root")
        pytest.skip("needs root to make namespaces for other users")
    return NFT


@contextlib.contextmanager
def _namespace_holder(*prefix: str, user: bool = False) -> Iterator[int]:
    """A process in a network namespace of its own (and a user namespace: ``user``)."""
    flags = ["-U", "-n"] if user else ["-n"]
    holder = subprocess.Popen([*prefix, "unshare", *flags, "sleep", "60"])
    try:
        for _ in range(200):
            try:
                if os.readlink(f"/proc/{holder.pid}/ns/net") != os.readlink("/proc/self/ns/net"):
                    break
            except OSError:
                pass
            subprocess.run(["sleep", "0.02"], check=True)
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def _loaded_rules(pid: int) -> str:
    return subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "nft", "list", "ruleset"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


async def test_the_rules_load_into_a_real_namespace_as_root() -> None:
    nft = _require_root_and_nft()
    egress = EgressFilter(
        nft=nft, dns="10.0.2.3", allowed=parse_networks("198.51.100.0/24", source="a")
    )
    with _namespace_holder() as pid:
        network = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            await egress.apply(network, owner=None)
        finally:
            os.close(network)
        loaded = _loaded_rules(pid)
    assert "table inet loom_egress" in loaded
    assert "198.51.100.0/24 accept" in loaded and "169.254.0.0/16" in loaded, loaded
    assert "loom_egress" not in _own_rules(), "the agent's own namespace was filtered"


def _own_rules() -> str:
    return subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True).stdout


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory an unprivileged user can read (pytest's own are private to root)."""
    directory = Path(tempfile.mkdtemp(prefix="loom-egress-test-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_an_unprivileged_agent_loads_them_through_the_owning_user_namespace(
    shared_dir: Path,
) -> None:
    """What a non-root agent does: enter the user namespace it owns (bwrap's), keep
    CAP_NET_ADMIN across exec, and load the rules into the network namespace it owns."""
    nft = _require_root_and_nft()
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    rules = shared_dir / "rules.nft"
    rules.write_text(EgressFilter(nft=nft, dns="10.0.2.3").script())
    rules.chmod(0o644)
    script = shared_dir / "_enter_namespaces.py"
    shutil.copy(Path(sandbox_egress.__file__).with_name("_enter_namespaces.py"), script)
    script.chmod(0o644)
    python = shutil.which("python3", path="/usr/bin:/bin")
    assert python is not None
    with _namespace_holder(*nobody, user=True) as pid:
        entered = subprocess.run(
            [
                *nobody,
                "sh",
                "-c",
                f'exec 3</proc/{pid}/ns/user 4</proc/{pid}/ns/net; exec "$0" -I -S "$1" '
                f'--user 3 --net 4 -- "$2" -f "$3"',
                python,
                str(script),
                nft,
                str(rules),
            ],
            capture_output=True,
            text=True,
        )
        if entered.returncode != 0 and "setns(user)" in entered.stderr:
            print(f"userns egress test skipped: {entered.stderr.strip()}")
            pytest.skip(f"unprivileged user namespaces are not usable here: {entered.stderr}")
        assert entered.returncode == 0, entered.stderr
        assert "reject with icmpx admin-prohibited" in _loaded_rules(pid)


async def test_a_failing_nft_is_an_error_not_an_open_network() -> None:
    _require_root_and_nft()
    egress = EgressFilter(nft="/bin/false", dns="10.0.2.3")
    with _namespace_holder() as pid:
        network = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            with pytest.raises(EgressUnavailable, match="could not load"):
                await egress.apply(network, owner=None)
        finally:
            os.close(network)
    with pytest.raises(EgressUnavailable, match="apt-get install nftables"):
        await EgressFilter(nft=None, dns="10.0.2.3").apply(0, owner=None)
