"""``python -m bench._router_live_engine``: the emulated engine of ``python -m workers.engine``
(same classes, same arguments), plus ``GET /bench/engine_stats`` saying whether it kept up.

The engine sleeps each step's modelled time scaled by ``--time-scale``; on a busy machine its
loop can wake late and the step slips. ``busy_wall_s`` (wall time with work on hand) against
``model_busy_s · time_scale`` (the steps' modelled time) is that slip, which a benchmark must
report before it trusts a wall-clock makespan.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from workers.engine.__main__ import make_engine, parse_args
from workers.engine.app import EngineApp
from workers.engine.asgi import Receive, Scope, Send, Server, bind, send_json
from workers.engine.core import EmulatedEngine, EngineConfig, EngineRequest

STATS_PATH = "/bench/engine_stats"


class BusyClockEngine(EmulatedEngine):
    """An :class:`EmulatedEngine` that also sums the wall time it had work on hand."""

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.busy_wall_s = 0.0
        self._busy_since: float | None = None

    def submit(self, rid: str, **request: Any) -> EngineRequest:
        if self._busy_since is None:
            self._busy_since = time.monotonic()
        return super().submit(rid, **request)

    def _advance(
        self, prefills: list[tuple[EngineRequest, int]], seconds: float, decode: int
    ) -> None:
        super()._advance(prefills, seconds, decode)
        if self._busy_since is not None and not self._running and not self._pending:
            self.busy_wall_s += time.monotonic() - self._busy_since
            self._busy_since = None

    def describe(self) -> dict[str, Any]:
        stats = self.stats
        return {
            "busy_wall_s": self.busy_wall_s,
            "model_busy_s": stats.busy_seconds,
            "time_scale": self.config.time_scale,
            "generation_tokens": stats.generation_tokens,
            "prompt_tokens": stats.prompt_tokens,
            "requests_finished": stats.requests_finished,
            "preemptions": stats.preemptions,
            "prefill_tokens": stats.prefill_tokens,
            "cached_prompt_tokens": stats.cached_prompt_tokens,
            "steps": stats.steps,
            "idle": self._busy_since is None,
        }


class StatsApp:
    """The engine's own app, with the one extra route."""

    def __init__(self, engine: BusyClockEngine, model_name: str) -> None:
        self.engine = engine
        self.inner = EngineApp(engine, model_name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == STATS_PATH:
            await send_json(send, 200, self.engine.describe())
            return
        await self.inner(scope, receive, send)


async def main() -> None:
    args = parse_args()
    emulated, model_name = make_engine(args)  # the engine CLI's own reading of its arguments
    if not isinstance(emulated, EmulatedEngine):
        raise SystemExit("this host serves the emulated backend only")
    engine = BusyClockEngine(emulated.config)
    server = Server(StatsApp(engine, model_name), bind(args.host, args.port))
    print(f"emulated engine serving {model_name} on {server.url}", flush=True)
    try:
        await server.serve_forever()
    finally:
        await engine.stop()


if __name__ == "__main__":
    import uvloop

    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(main())
