"""``python -m workers.buffers --address tcp://127.0.0.1:5555``: the buffer service process.

It serves the buffers the control plane declares (``follower``): point the web tier's
``LOOM_BUFFER_SERVICE`` at the same address, and give both the same Redis and key prefix.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

from workers.buffers.definitions import BufferNames
from workers.buffers.follower import DefinitionFollower
from workers.buffers.service import BufferServer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.buffers", description=__doc__)
    parser.add_argument(
        "--address", default="tcp://127.0.0.1:5555", help="ZeroMQ address to serve on"
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL"),
        help="Redis of the control plane (its buffer definitions); env REDIS_URL",
    )
    parser.add_argument(
        "--prefix", default=os.environ.get("LOOM_STREAM_PREFIX", "loom"), help="Redis key prefix"
    )
    args = parser.parse_args(argv)
    if not args.redis_url:
        parser.error("give --redis-url (or REDIS_URL): the buffers come from the control plane")
    return args


def main(args: argparse.Namespace) -> None:
    server = BufferServer(address=args.address).start()
    follower = DefinitionFollower(server, args.redis_url, BufferNames(args.prefix)).start()
    print(f"buffer service on {server.address}", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    follower.stop()
    server.stop()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main(parse_args())
