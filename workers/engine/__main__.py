"""``python -m workers.engine --port 30000``: one SGLang-like LLM worker.

``python -m workers.engine supervise ...`` starts an engine (SGLang on GPU nodes, or one of
these) and keeps it up instead (:mod:`workers.engine.supervise`).

``--backend emulated`` (the default): continuous batching timed by the simulator's model, filler
text. ``--backend llamacpp``: llama.cpp decoding a GGUF model on this CPU — ``--model PATH``, or
without it the project's own small model, written under ``--model-dir`` on first use.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from pathlib import Path

from workers.engine.app import Engine, EngineApp
from workers.engine.asgi import Server, bind
from workers.engine.core import EmulatedEngine, EngineConfig


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.engine", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000, help="0: any free port (printed)")
    parser.add_argument("--backend", choices=("emulated", "llamacpp"), default="emulated")
    parser.add_argument("--model-name", default=None, help="the served model's id")
    parser.add_argument("--model", type=Path, default=None, help="llamacpp: a GGUF file")
    parser.add_argument(
        "--model-dir", type=Path, default=Path("var/models"), help="llamacpp: the tiny model's home"
    )
    parser.add_argument("--slots", type=int, default=2, help="llamacpp: sequences decoded at once")
    parser.add_argument("--context", type=int, default=4096, help="llamacpp: tokens per sequence")
    parser.add_argument("--max-running-requests", type=int, default=256, help="decode batch cap")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree emulated")
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="wall seconds per modelled second"
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds lengths without max_tokens")
    parser.add_argument(
        "--no-preemption", action="store_true", help="priority orders the queue only"
    )
    parser.add_argument(
        "--disable-radix-cache",
        action="store_true",
        help="emulated: keep no prefix cache (SGLang's flag of the same name)",
    )
    return parser.parse_args(argv)


def make_engine(args: argparse.Namespace) -> tuple[Engine, str]:
    """The engine the arguments ask for and the model id it serves."""
    if args.backend == "llamacpp":
        from workers.engine.llamacpp import LlamaCppConfig, LlamaCppEngine
        from workers.engine.tiny_model import tiny_model

        path = args.model or tiny_model(args.model_dir)
        slots = LlamaCppConfig(slots=args.slots, context=args.context)
        return LlamaCppEngine(path, slots), args.model_name or path.stem
    config = EngineConfig(
        max_batch=args.max_running_requests,
        mp=args.tp,
        preemptive=not args.no_preemption,
        prefix_cache=not args.disable_radix_cache,
        time_scale=args.time_scale,
        seed=args.seed,
    )
    return EmulatedEngine(config), args.model_name or "loom-emulated"


async def main(args: argparse.Namespace) -> None:
    engine, model_name = make_engine(args)
    server = Server(EngineApp(engine, model_name), bind(args.host, args.port))
    print(f"{args.backend} engine serving {model_name} on {server.url}", flush=True)
    try:
        await server.serve_forever()
    finally:
        await engine.stop()


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["supervise"]:
        from workers.engine.supervise import run

        raise SystemExit(run(sys.argv[2:]))
    logging.basicConfig(level=logging.INFO)
    import uvloop

    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the SIGINT it handled
        uvloop.run(main(parse_args()))
