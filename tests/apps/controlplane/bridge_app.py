"""A WSGI app behind the HTTP bridge, served by a real uvicorn in ``test_http_bridge.py``:
``/wait`` long-polls (ends when its client hangs up, or after 30 s), ``/now`` answers at once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from controlplane.http_bridge import HANGUP_KEY, WsgiBridge

THREADS = 2


def waiting_wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ["PATH_INFO"] == "/wait":
        hung_up = threading.Event()
        environ[HANGUP_KEY].on_hangup(hung_up.set)
        hung_up.wait(30)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def make_app() -> WsgiBridge:
    return WsgiBridge(waiting_wsgi, threads=THREADS, spool_bytes=1024)
