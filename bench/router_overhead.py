"""The router's added latency per request, against calling the emulated engine directly.

Three processes, as in production: one emulated engine (``python -m workers.engine``, real-time
step times from the simulator's Qwen3-14B/H100 model, batch cap 512), one router in front of it
(``python -m workers.router``, Heddle policy, job keys and trajectories checked against the
control plane's Redis registry and trajectory state published on its stream — the production
path; open mode when Redis is unreachable, recorded in ``params``), and this client (uvloop, the
router's own keep-alive upstream client, so the client's cost is the same on both sides).

The router runs twice, one process per HTTP server it can serve on (``--http-server``: its
own lean server, :mod:`workers.router.server`, which relays a worker's stream from the socket
callbacks; and uvicorn), both in front of the same engine; each pair of segments below measures
every router against the same direct segment. The series ``cN`` is the router's default server
(the targets read it) and ``cN_<server>`` the other, measured in the same run (``params``
names which is which).

A byte relay (this module's ``relay`` command: each client connection spliced to its own engine
connection, bytes written on as they arrive, no parsing) runs beside the routers in front of the
same engine and is measured in the same pairs (series ``cN_byte_relay``): the cost of one more
loopback hop through a Python (uvloop) process on this machine, the floor under any router of
this design, so a router's figure reads as that floor plus its own work.

``C`` closed-loop streams (C = 1 and 256), each its own trajectory, send streamed completions
of ``tokens`` output tokens back to back. Segments alternate direct → via router, ``pairs``
times; each pair gives the difference of the two segments' p50 end-to-end times (request sent
to last byte) and the median over pairs is the added latency — alternating cancels the drift a
shared machine adds over a run. Targets (the issue): p50 added ≤ 0.5 ms and ≤ 5 % of the direct
end-to-end time, at both concurrencies.

At C = 1 the engine idles between requests, so a request starts at once and the difference is
the router's own time. At C = 256 the engine's decode loop is always busy: a request waits for
the next step boundary (tens of ms), so the difference also holds how the extra hop shifts
arrivals against steps, plus the router's CPU competing with the engine's on this 2-core
machine — between two segments the batch's own dynamics move p50 by ±10 ms, far more than the
router costs. So at C > 1 the run also measures *mixed* segments: half the streams direct, half
through the router, at the same time, against the same engine batch; the difference of the two
halves' p50 is the router's added latency under that load, with the batch's noise common to
both. The targets above one stream read the mixed segments; the alternating ones (the first
design, whose C = 256 figures swung from −7 ms to +20 ms between quick runs) stay beside them
in the series. Time to first token and the router process's CPU time per request are recorded beside
it (``/proc``, sampled at the kernel's tick: approximate, and inflated at C = 1, where each of a
request's chunks wakes an idle process).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.report import BenchReport, Target
from workers.router.server import DEFAULT_SERVER, SERVERS

NAME = "router_overhead"
MODEL = "loom-emulated"
KEY = "loom_bench_router_overhead"
HTTP_SERVERS = tuple(sorted(SERVERS))  # every router HTTP server, measured in the same run
HEADERS = ((b"content-type", b"application/json"), (b"authorization", b"Bearer " + KEY.encode()))
BYTE_RELAY = "byte_relay"  # the floor's series suffix (module docstring)


class _RelayUpstream(asyncio.Protocol):
    """The engine side of one relayed connection."""

    def __init__(self, client: _RelayClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.transport.close()


class _RelayClient(asyncio.Protocol):
    """The client side: what arrives before the engine connection is up waits in ``early``."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.upstream: _RelayUpstream | None = None
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, self.upstream = await loop.create_connection(
            lambda: _RelayUpstream(self), self.host, self.port
        )
        assert self.upstream.transport is not None
        for data in self.early:
            self.upstream.transport.write(data)
        self.early.clear()

    def data_received(self, data: bytes) -> None:
        if self.upstream is None or self.upstream.transport is None:
            self.early.append(data)
        else:
            self.upstream.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


async def _relay_main(engine_url: str) -> None:
    """``python -m bench.router_overhead relay URL``: the byte relay (module docstring); uvloop
    sets TCP_NODELAY on its sockets, as on the routers'."""
    host, port = engine_url.removeprefix("http://").rsplit(":", 1)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _RelayClient(host, int(port)), "127.0.0.1", 0)
    print(f"byte relay on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


def _start(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    url = line.rsplit(" ", 1)[-1].strip()
    if not url.startswith("http://"):
        process.kill()
        raise RuntimeError(f"{args[0]} did not start: {line!r}")
    return process, url


async def _redis_ready(url: str, prefix: str, trajectories: int) -> bool:
    import redis.asyncio as aioredis

    from workers.router.registry import Registry, RegistryNames

    client = aioredis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        registry = Registry(client, RegistryNames(prefix))
        await registry.register_key(KEY, "1")
        async with client.pipeline(transaction=False) as pipe:
            for i in range(trajectories):
                pipe.hset(registry.names.trajectories, f"bench-{i}", "1")
            await pipe.execute()
        return True
    except OSError:
        return False
    finally:
        await client.aclose()


async def _cleanup_redis(url: str, prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


async def _segment(
    url: str, concurrency: int, requests_per_stream: int, tokens: int, routed: bool
) -> dict[str, list[float]]:
    """``concurrency`` closed-loop streams; per request: end-to-end and first-byte seconds."""
    from workers.router.upstream import Upstream

    upstream = Upstream(url)
    e2e: list[float] = []
    ttft: list[float] = []

    async def stream(index: int) -> None:
        body = (
            b'{"model":"' + MODEL.encode() + b'","prompt":"def f(x): return x",'
            b'"max_tokens":' + str(tokens).encode() + b',"stream":true'
            + (b',"loom_trajectory":"bench-' + str(index).encode() + b'"' if routed else b"")
            + b"}"
        )  # fmt: skip
        for _ in range(requests_per_stream):
            started = time.perf_counter()
            response = await upstream.request("POST", "/v1/completions", body, HEADERS)
            first = None
            async for _chunk in response.chunks():
                if first is None:
                    first = time.perf_counter()
            if response.status != 200:
                raise RuntimeError(f"status {response.status} from {url}")
            end = time.perf_counter()
            e2e.append(end - started)
            ttft.append((first or end) - started)

    await asyncio.gather(*(stream(i) for i in range(concurrency)))
    await upstream.close()
    return {"e2e": e2e, "ttft": ttft}


async def _mixed_segment(
    engine_url: str,
    router_url: str,
    concurrency: int,
    requests_per_stream: int,
    tokens: int,
    named: bool = True,
) -> dict[str, dict[str, list[float]]]:
    """Half the streams direct, half through the router, at once: one engine batch for both."""
    half = concurrency // 2
    direct, routed = await asyncio.gather(
        _segment(engine_url, half, requests_per_stream, tokens, routed=False),
        _segment(router_url, concurrency - half, requests_per_stream, tokens, routed=named),
    )
    return {"direct": direct, "routed": routed}


def _p50_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    added = [r["router_e2e_p50_ms"] - r["direct_e2e_p50_ms"] for r in rows]
    direct_p50 = statistics.median(r["direct_e2e_p50_ms"] for r in rows)
    return {
        "added_p50_ms": statistics.median(added),
        "added_ttft_p50_ms": statistics.median(
            r["router_ttft_p50_ms"] - r["direct_ttft_p50_ms"] for r in rows
        ),
        "direct_e2e_p50_ms": direct_p50,
        "added_fraction": statistics.median(added) / direct_p50,
    }


def _row(direct: dict[str, list[float]], routed: dict[str, list[float]]) -> dict[str, Any]:
    return {
        "direct_e2e_p50_ms": _p50_ms(direct["e2e"]),
        "router_e2e_p50_ms": _p50_ms(routed["e2e"]),
        "direct_ttft_p50_ms": _p50_ms(direct["ttft"]),
        "router_ttft_p50_ms": _p50_ms(routed["ttft"]),
        "requests_per_side": len(direct["e2e"]),
    }


async def _measure(
    engine_url: str,
    routers: dict[str, tuple[str, int, bool]],
    concurrency: int,
    per_stream: int,
    tokens: int,
    pairs: int,
) -> dict[str, dict[str, Any]]:
    """Per router (its HTTP server's name, or the byte relay: URL, pid, whether requests name a
    trajectory), the added latency at ``concurrency``. Each pair is one direct segment then one
    segment through each router, so every router is compared with the same direct baseline; the
    mixed segments run once per router per pair."""
    await _segment(engine_url, concurrency, 1, tokens, routed=False)  # warm-up: connections
    for router_url, _, named in routers.values():
        await _segment(router_url, concurrency, 1, tokens, routed=named)
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in routers}
    for _ in range(pairs):
        direct = await _segment(engine_url, concurrency, per_stream, tokens, routed=False)
        for name, (router_url, router_pid, named) in routers.items():
            cpu_before = _cpu_seconds(router_pid)
            routed = await _segment(router_url, concurrency, per_stream, tokens, routed=named)
            cpu = _cpu_seconds(router_pid) - cpu_before
            row = _row(direct, routed)
            row["router_cpu_us_per_request"] = cpu / len(routed["e2e"]) * 1e6
            rows[name].append(row)
    mixed_rows: dict[str, list[dict[str, Any]]] = {name: [] for name in routers}
    if concurrency > 1:
        for _ in range(pairs):
            for name, (router_url, _, named) in routers.items():
                both = await _mixed_segment(
                    engine_url, router_url, concurrency, per_stream, tokens, named
                )
                mixed_rows[name].append(_row(both["direct"], both["routed"]))
    results: dict[str, dict[str, Any]] = {}
    for name in routers:
        mixed: dict[str, Any] = {}
        if mixed_rows[name]:
            summary = _summary(mixed_rows[name])
            mixed = {"mixed_pairs": mixed_rows[name]}
            mixed.update({f"mixed_{key}": value for key, value in summary.items()})
        results[name] = {
            **mixed,
            "concurrency": concurrency,
            "http_server": name,
            "pairs": rows[name],
            **_summary(rows[name]),
            "router_cpu_us_per_request": statistics.median(
                r["router_cpu_us_per_request"] for r in rows[name]
            ),
        }
    return results


def run(quick: bool) -> BenchReport:
    from bench._execution import redis_url

    tokens = 8 if quick else 32
    plan = {1: (30, 3), 256: (2, 3)} if quick else {1: (60, 5), 256: (3, 5)}
    prefix = f"bench-router-{uuid.uuid4().hex[:8]}"
    url = redis_url()
    load = os.getloadavg()[0]
    with_redis = asyncio.run(_redis_ready(url, prefix, max(plan)))
    engine, engine_url = _start(
        ["workers.engine", "--port", "0", "--max-running-requests", "512", "--model-name", MODEL]
    )
    router_args = ["workers.router", "--port", "0", "--worker", engine_url, "--policy", "heddle"]
    router_args += ["--batch-limit", "512"]
    router_args += ["--redis-url", url, "--prefix", prefix] if with_redis else ["--open"]
    series: dict[str, Any] = {}
    routers: dict[str, tuple[subprocess.Popen[str], str]] = {}
    try:
        for server in HTTP_SERVERS:  # one router per HTTP server, same engine, same Redis
            routers[server] = _start([*router_args, "--http-server", server])
        routers[BYTE_RELAY] = _start(["bench.router_overhead", "relay", engine_url])
        import uvloop

        for concurrency, (per_stream, pairs) in plan.items():
            measured = uvloop.run(
                _measure(
                    engine_url,
                    {
                        name: (router_url, p.pid, name != BYTE_RELAY)
                        for name, (p, router_url) in routers.items()
                    },
                    concurrency, per_stream, tokens, pairs,
                )
            )  # fmt: skip
            for server, row in measured.items():
                key = f"c{concurrency}" if server == DEFAULT_SERVER else f"c{concurrency}_{server}"
                series[key] = row
    finally:
        for process, _ in routers.values():
            process.terminate()
            process.wait()
        engine.terminate()
        engine.wait()
        if with_redis:
            asyncio.run(_cleanup_redis(url, prefix))
    report = BenchReport(
        benchmark=NAME,
        quick=quick,
        params={
            "output_tokens_per_request": tokens,
            "plan": {f"c{c}": {"requests_per_stream": r, "pairs": p} for c, (r, p) in plan.items()},
            "engine": "workers.engine, Qwen3-14B/H100 context model, real time, batch cap 512",
            "router": "heddle policy"
            + (", Redis registry + state stream" if with_redis else ", open"),
            "load_average_1min_at_start": load,
            "load_average_1min_at_end": os.getloadavg()[0],
            "http_servers": {
                f"c{c}" if server == DEFAULT_SERVER else f"c{c}_{server}": server
                for c in plan
                for server in HTTP_SERVERS
            },
            "targets_read": f"the router's default HTTP server ({DEFAULT_SERVER})",
            "floor": f"cN_{BYTE_RELAY}: a byte relay (no parsing) in front of the same engine",
        },
        series=series,
    )
    for concurrency in plan:
        row = series[f"c{concurrency}"]
        # Above one stream the targets read the mixed segments (module docstring); the
        # alternating-segment figures stay beside them in the series.
        prefix = "mixed_" if concurrency > 1 else ""
        report.targets.append(
            Target.at_most(f"added_p50_ms_c{concurrency}", row[f"{prefix}added_p50_ms"], 0.5)
        )
        report.targets.append(
            Target.at_most(f"added_fraction_c{concurrency}", row[f"{prefix}added_fraction"], 0.05)
        )
    return report


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "relay":
        import uvloop

        uvloop.run(_relay_main(sys.argv[2]))
    else:
        sys.exit(
            "usage: python -m bench.router_overhead relay ENGINE_URL (python -m bench runs it)"
        )
