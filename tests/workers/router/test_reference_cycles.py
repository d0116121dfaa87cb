"""A finished request leaves nothing for the cycle collector: its objects outlive the young
generations (a request lasts many of their passes), so a cycle among them waits for a full
pass, which pauses every stream in flight."""

from __future__ import annotations

import asyncio
import gc
import json

import pytest

from tests.workers.router.conftest import KEY, MODEL, start_stack, stop_stack
from workers.router.upstream import Upstream

pytestmark = pytest.mark.redis

ROUTER_KINDS = {"_Request", "InFlight", "StreamRelay", "UpstreamResponse", "_Step"}


@pytest.mark.parametrize("http_server", ["lean", "uvicorn"])
async def test_a_finished_request_leaves_no_reference_cycle(
    redis_url: str, http_server: str
) -> None:
    stack = await start_stack(redis_url, http_server=http_server)
    upstream = Upstream(stack.url)
    headers = ((b"content-type", b"application/json"), (b"authorization", f"Bearer {KEY}".encode()))
    try:
        await stack.trajectory("t-cycles")
        gc.collect()
        gc.disable()
        try:
            for stream in (True, False, True):
                body = {"model": MODEL, "prompt": "x", "max_tokens": 4, "stream": stream}
                payload = json.dumps({**body, "loom_trajectory": "t-cycles"}).encode()
                response = await upstream.request("POST", "/v1/completions", payload, headers)
                await response.read()
                assert response.status == 200
            await asyncio.sleep(0.1)  # the router's accounting after the answer
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            left = {type(thing).__name__ for thing in gc.garbage} & ROUTER_KINDS
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert not left, f"in reference cycles after the request: {sorted(left)}"
    finally:
        await upstream.close()
        await stop_stack(stack)
