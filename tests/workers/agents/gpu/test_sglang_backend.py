"""The SGLang backend: its server command and request shapes here; the live round trip (launch,
release, resume, serve) only where CUDA and sglang exist — it skips with the reason elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.agents.gpu.backend import Chunk
from workers.agents.gpu.cache import ServiceCache
from workers.agents.gpu.devices import Device, discover_devices
from workers.agents.gpu.sglang_backend import (
    SglangService,
    SglangUnavailable,
    launch_command,
    parse_response,
    request_body,
    sglang_missing,
)

TWO_GPUS = Chunk(2, 2, (Device(2, "cuda:2", 80_000), Device(3, "cuda:3", 80_000)))


def test_one_server_per_chunk_with_tp_equal_to_the_chunk_size() -> None:
    command, env = launch_command(
        model_path="/models/rm", task="reward", chunk=TWO_GPUS, port=31000, mem_fraction=0.25
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    joined = " ".join(command)
    assert "--tp-size 2" in joined and "--port 31000" in joined
    assert "--mem-fraction-static 0.250" in joined
    for flag in ("--enable-memory-saver", "--enable-weights-cpu-backup", "--is-embedding"):
        assert flag in command
    assert "--enable-priority-scheduling" in command
    teacher, _ = launch_command(
        model_path="/models/t", task="logprobs", chunk=TWO_GPUS, port=1, mem_fraction=0.5
    )
    assert "--is-embedding" not in teacher


def test_requests_carry_their_priority() -> None:
    path, body = request_body("reward", [[1, 2, 3]], priority=7)
    assert (path, body) == ("/classify", {"input_ids": [[1, 2, 3]], "priority": 7})
    path, body = request_body("logprobs", [[1, 2, 3]], priority=-1)
    assert path == "/generate" and body["priority"] == -1
    assert body["return_logprob"] and body["sampling_params"]["max_new_tokens"] == 0


def test_responses_parse_into_the_torch_backends_shapes() -> None:
    assert parse_response("reward", [{"embedding": [0.5]}, {"embedding": [-1.0]}]) == {
        "scores": [0.5, -1.0]
    }
    logprobs = {"meta_info": {"input_token_logprobs": [[None, 1, None], [-0.5, 7, None]]}}
    assert parse_response("logprobs", [logprobs]) == {"logprobs": [[-0.5]]}


async def test_prepare_refuses_with_the_reason_where_sglang_cannot_run(tmp_path: Path) -> None:
    reason = sglang_missing()
    if reason is None:
        pytest.skip("CUDA and sglang are present: the live test below runs instead")
    service = SglangService("rm", tmp_path, "reward", footprint_mb=1_000, device_memory_mb=80_000)
    with pytest.raises(SglangUnavailable, match=reason):
        await service.prepare()
    await service.close()


@pytest.mark.gpu
async def test_live_release_and_resume_round_trip(tmp_path: Path) -> None:
    reason = sglang_missing()
    if reason is not None:
        pytest.skip(f"SGLang live test: {reason}")
    from workers.agents.gpu.checkpoints import create_checkpoint

    model = create_checkpoint(tmp_path / "teacher", "logprobs", hidden_size=256, layers=2)
    devices = discover_devices(1)
    service = SglangService(
        "teacher", model, "logprobs", footprint_mb=8_000, device_memory_mb=devices[0].memory_mb
    )
    cache = ServiceCache(devices, {"teacher": service})
    await cache.prepare()
    try:
        first = await cache.serve("teacher", [0], {"input_ids": [[1, 5, 6, 7]]}, priority=1)
        await service.evict(Chunk(0, 1, (devices[0],)))
        await service.restore(Chunk(0, 1, (devices[0],)))
        again = await cache.serve("teacher", [0], {"input_ids": [[1, 5, 6, 7]]}, priority=1)
        assert len(first.output["logprobs"][0]) == 3
        assert again.output["logprobs"] == pytest.approx(first.output["logprobs"], abs=1e-3)
    finally:
        await cache.close()
