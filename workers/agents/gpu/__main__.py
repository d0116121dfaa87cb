"""``python -m workers.agents.gpu --redis-url URL --pool NAME --node-id ID --service ...``.

Needs Redis only (no Django, no database). Services are given as
``--service NAME=torch:TASK:CHECKPOINT_DIR`` or
``--service NAME=sglang:TASK:MODEL_DIR:FOOTPRINT_MB`` (TASK: ``reward`` or ``logprobs``).
Without CUDA, ``--devices N --device-memory-mb M`` declare N CPU stand-in devices.
``--make-checkpoint TASK:DIR`` writes a small random-weight HF checkpoint first (demo, bench).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import cast

import uvloop

from workers.agents.common.cli import (
    add_common_arguments,
    configure_logging,
    serve_until_signalled,
    settings_from,
    streams_from,
)
from workers.agents.gpu.agent import GpuAgent
from workers.agents.gpu.backend import ServiceBackend
from workers.agents.gpu.cache import ServiceCache
from workers.agents.gpu.checkpoints import Task, create_checkpoint
from workers.agents.gpu.devices import Device, compute_slots, discover_devices
from workers.agents.gpu.sglang_backend import SglangService
from workers.agents.gpu.torch_backend import TorchService
from workers.transport.redis_streams import RedisStreamsTransport

TASKS = ("reward", "logprobs")


def parse_service(text: str, devices: list[Device]) -> ServiceBackend:
    """``NAME=torch:TASK:DIR`` or ``NAME=sglang:TASK:DIR:FOOTPRINT_MB``; errors name the part."""
    name, _, spec = text.partition("=")
    parts = spec.split(":")
    if not name or len(parts) < 3:
        raise ValueError(f"--service {text!r}: expected NAME=BACKEND:TASK:PATH[:FOOTPRINT_MB]")
    kind, task, path = parts[0], parts[1], parts[2]
    if task not in TASKS:
        raise ValueError(f"--service {text!r}: task must be one of {TASKS}, not {task!r}")
    if kind == "torch" and len(parts) == 3:
        return TorchService(name, _checkpoint(text, path), cast(Task, task))
    if kind == "sglang" and len(parts) == 4:
        return SglangService(
            name,
            _checkpoint(text, path),
            cast(Task, task),
            footprint_mb=float(parts[3]),
            device_memory_mb=min(device.memory_mb for device in devices),
        )
    raise ValueError(f"--service {text!r}: backend must be torch (3 parts) or sglang (4 parts)")


def _checkpoint(text: str, path: str) -> str:
    if not (Path(path) / "config.json").is_file():
        raise ValueError(
            f"--service {text!r}: {path} is not a Hugging Face checkpoint directory (it holds no "
            "config.json); --make-checkpoint TASK:DIR writes a small one"
        )
    return path


# discover_devices's parameters, as the command line names them
_DEVICE_OPTIONS = {"count": "--devices", "memory_mb": "--device-memory-mb"}


def configure(args: argparse.Namespace) -> tuple[list[Device], dict[str, ServiceBackend]]:
    """The checkpoints to write, the devices and the services the command line declares; a
    ValueError naming the option for anything wrong (``main`` prints it, no traceback)."""
    for item in args.make_checkpoint:
        task, _, path = item.partition(":")
        if task not in TASKS or not path:
            raise ValueError(f"--make-checkpoint {item!r}: expected TASK:DIR, TASK one of {TASKS}")
        create_checkpoint(path, cast(Task, task))
    try:
        devices = discover_devices(args.devices, args.device_memory_mb)
    except ValueError as error:
        parameter, _, reason = str(error).partition(": ")
        raise ValueError(f"{_DEVICE_OPTIONS.get(parameter, parameter)}: {reason}") from error
    services: dict[str, ServiceBackend] = {}
    for text in args.service:
        backend = parse_service(text, devices)
        services[backend.name] = backend
    if not services:
        raise ValueError("--service: at least one is required")
    return devices, services


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workers.agents.gpu", description=__doc__)
    add_common_arguments(parser)
    parser.add_argument("--devices", type=int, help="GPUs to use (CPU stand-ins without CUDA)")
    parser.add_argument("--device-memory-mb", type=int, help="memory per device for the cache")
    parser.add_argument("--service", action="append", default=[], help="see above; repeatable")
    parser.add_argument("--make-checkpoint", action="append", default=[], metavar="TASK:DIR")
    parser.add_argument(
        "--host-compute-slots",
        action="store_true",
        help="CPU stand-ins: execute at most as many requests at once as the host has cores",
    )
    return parser


async def main_async(
    args: argparse.Namespace, devices: list[Device], services: dict[str, ServiceBackend]
) -> None:
    slots = compute_slots(devices) if args.host_compute_slots else None
    transport = RedisStreamsTransport(args.redis_url)
    agent = GpuAgent(
        transport=transport,
        node_id=args.node_id,
        pool=args.pool,
        cache=ServiceCache(devices, services, compute_slots=slots),
        streams=streams_from(args),
        settings=settings_from(args),
    )
    try:
        await serve_until_signalled(agent)
    finally:
        await transport.close()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no progress bars in an agent's log
    try:
        devices, services = configure(args)
    except ValueError as error:
        parser.error(str(error))  # usage and the reason, exit status 2
    uvloop.run(main_async(args, devices, services))
    return 0


if __name__ == "__main__":
    sys.exit(main())
