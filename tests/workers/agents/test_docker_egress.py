"""Docker backend egress: a network-on container, on a real dockerd, reaches neither the host's
addresses (the bridge's gateway included) nor private networks nor 169.254.169.254, rejected at
once by the rules loaded into its own namespace; Docker's embedded DNS and its upstream resolvers
stay reachable; where the rules cannot be loaded, network-on dispatches fail closed and
network-off ones go on. The operator's allow-list opening a host address is
test_docker_sandbox.py's network test."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.workers.agents.test_docker_sandbox import (
    _dispatch,
    _host_address,
    _listener,
    _make_backend,
    _run,
)
from workers.agents.cpu import DockerBackend
from workers.agents.cpu.docker_sandbox import ContainerEgress, upstream_resolvers
from workers.agents.cpu.sandbox import DEFAULT_PATH
from workers.agents.cpu.sandbox_egress import EgressUnavailable
from workers.testing.dockerd import DockerDaemon

PROBE = "echo {word} | nc -w 10 {host} {port} 2>&1 && echo reached {host} || echo failed {host}"


def _egress(*, nft: str | None = "auto", resolvers: tuple[str, ...] = ()) -> ContainerEgress:
    found = shutil.which("nft", path=DEFAULT_PATH) if nft == "auto" else nft
    return ContainerEgress(nft=found, local=True, root=os.geteuid() == 0, resolvers=resolvers)


def _gateway(daemon: DockerDaemon, backend: DockerBackend) -> str:
    return daemon.docker(
        "network", "inspect", backend.tool_network, "-f", "{{(index .IPAM.Config 0).Gateway}}"
    )


def _nft_rules(backend: DockerBackend, trajectory: str) -> str:
    pid = backend._containers[trajectory].init_pid
    command = ["nsenter", "-t", str(pid), "-n", "nft", "list", "table", "inet", "loom_egress"]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def test_upstream_resolvers_skip_loopback_stubs_and_follow_systemd(tmp_path: Path) -> None:
    stub, upstream = tmp_path / "resolv.conf", tmp_path / "systemd.conf"
    stub.write_text("# managed\nnameserver 127.0.0.53\noptions edns0\n")
    upstream.write_text("nameserver 10.1.2.3\nnameserver fe80::1%eth0\nnameserver bogus\n")
    assert upstream_resolvers([stub, upstream]) == ("10.1.2.3", "fe80::1")
    stub.write_text("nameserver 192.168.1.1\n")
    assert upstream_resolvers([stub, upstream]) == ("192.168.1.1",)
    assert upstream_resolvers([tmp_path / "missing"]) == ()


async def test_rules_are_refused_with_the_fix_where_they_cannot_be_loaded() -> None:
    cases = [
        (ContainerEgress(nft="/usr/sbin/nft", local=False, root=True, resolvers=()), "remote"),
        (ContainerEgress(nft="/usr/sbin/nft", local=True, root=False, resolvers=()), "as root"),
        (
            ContainerEgress(nft=None, local=True, root=True, resolvers=()),
            "apt-get install nftables",
        ),
    ]
    for egress, fix in cases:
        assert egress.refusal is not None and fix in egress.refusal
        with pytest.raises(EgressUnavailable, match="network on") as raised:
            await egress.apply("c0ffee", os.getpid())
        assert fix in str(raised.value)


async def test_a_recycled_pid_never_leads_the_rules_into_another_namespace() -> None:
    """The agent's own pid stands for a container init's pid reused by a host process."""
    egress = ContainerEgress(nft="/usr/sbin/nft", local=True, root=True, resolvers=())
    with pytest.raises(EgressUnavailable, match="no longer the init"):
        await egress.apply(uuid.uuid4().hex, os.getpid())
    with pytest.raises(EgressUnavailable, match="is gone"):
        await egress.apply(uuid.uuid4().hex, 2**22 + 1)


def _rules_and_a_host_address() -> str:
    """The host's address, where rules can be loaded here and it has one (else the test skips)."""
    egress = _egress()
    if egress.refusal is not None:
        pytest.skip(f"egress rules cannot be loaded here: {egress.refusal}")
    address = _host_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    return address


@pytest.mark.docker
async def test_network_on_reaches_neither_the_host_nor_metadata(
    dockerd: tuple[DockerDaemon, str],
) -> None:
    """A service bound to the host's address and the bridge's gateway (both the host's) and the
    cloud metadata address are rejected at once, not waited out; nothing arrives."""
    address = _rules_and_a_host_address()
    daemon, image = dockerd
    backend = _make_backend(daemon, image, "egress-block")
    try:
        await _run(backend, "true", network=True, trajectory_id="t")  # makes the tool network
        gateway = _gateway(daemon, backend)
        with _listener(address) as (port, got), _listener(gateway) as (gateway_port, gateway_got):
            for host, target in ((address, port), (gateway, gateway_port), ("169.254.169.254", 80)):
                started = time.monotonic()
                probe = PROBE.format(word="probe", host=host, port=target)
                out = await _run(backend, probe, network=True, trajectory_id="t")
                elapsed = time.monotonic() - started
                assert out.splitlines()[-1] == f"failed {host}", out
                assert elapsed < 5.0, f"{host} rejected, not dropped: {elapsed:.1f} s"
            await asyncio.sleep(0.3)
        assert got == [] and gateway_got == []
        rules = _nft_rules(backend, "t")
        assert "169.254.0.0/16" in rules and "172.16.0.0/12" in rules, rules
    finally:
        await backend.close()


@pytest.mark.docker
async def test_embedded_dns_and_its_upstream_resolvers_stay_reachable(
    dockerd: tuple[DockerDaemon, str],
) -> None:
    """127.0.0.11 answers a container name with the rules loaded (its loopback path), and the
    resolvers dockerd forwards to, here the host's own address standing in for one, are open on
    port 53 only. Rules loaded again (a second attach) replace the first ones."""
    address = _rules_and_a_host_address()
    try:
        with socket.create_server((address, 53)):
            pass
    except OSError as exc:
        pytest.skip(f"port 53 of {address} is taken: {exc}")
    daemon, image = dockerd
    backend = _make_backend(daemon, image, "egress-dns", egress=_egress(resolvers=(address,)))
    name = backend.container_name("t")
    try:
        with _listener(address, 53) as (port, got), _listener(address) as (other, other_got):
            for _ in range(2):  # attached, detached, attached again: the rules loaded twice
                lookup = f"nslookup {name} 127.0.0.11 2>&1"
                dns = await _run(backend, lookup, network=True, trajectory_id="t")
                await _run(backend, "true", trajectory_id="t")
            probes = [
                PROBE.format(word=w, host=address, port=p) for w, p in (("53", port), ("x", other))
            ]
            out = await _run(backend, "; ".join(probes), network=True, trajectory_id="t")
            await asyncio.sleep(0.3)
        assert f"Name:\t{name}\nAddress: " in dns, dns  # answered, not only "Server:"
        assert (got, other_got) == ([b"53"], []), out
        assert f"reached {address}\n" in out and out.endswith(f"failed {address}\n"), out
        rules = _nft_rules(backend, "t")
        assert rules.count("reject") == 2 and rules.count("dport 53 accept") == 1, rules
    finally:
        await backend.close()


@pytest.mark.docker
async def test_without_nft_network_on_fails_closed_and_network_off_works(
    dockerd: tuple[DockerDaemon, str],
) -> None:
    daemon, image = dockerd
    backend = _make_backend(daemon, image, "egress-nonft", egress=_egress(nft=None))
    try:
        refused = await backend.run(_dispatch("on", "echo ran", network=True, trajectory_id="t"))
        assert refused.infra_error is not None and "apt-get install nftables" in refused.infra_error
        assert b"ran" not in refused.output
        out = await _run(backend, "ls /sys/class/net; echo alive", trajectory_id="t")
        assert out.split() == ["lo", "alive"], out
        name = backend.container_name("t")
        networks = daemon.docker("inspect", name, "-f", "{{json .NetworkSettings.Networks}}")
        assert backend.tool_network not in networks, networks  # never attached
    finally:
        await backend.close()


def test_container_rules_replace_earlier_ones_and_accept_every_resolver() -> None:
    script = _egress(resolvers=("10.9.9.9", "fd00::53")).filter.script()
    assert script.startswith("add table inet loom_egress\ndelete table inet loom_egress\n")
    assert "ip daddr 10.9.9.9 meta l4proto { tcp, udp } th dport 53 accept" in script
    assert "ip6 daddr fd00::53 meta l4proto { tcp, udp } th dport 53 accept" in script
    assert "10.0.0.0/8" in script and "169.254.0.0/16" in script
