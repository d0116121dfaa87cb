"""The PyTorch backend: replicas restored from the host copy compute what the checkpoint does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from workers.agents.gpu.backend import Chunk, ServiceError, chunk_of
from workers.agents.gpu.devices import Device, discover_devices, nvlink_groups
from workers.agents.gpu.standin import STANDIN_BLOCKS
from workers.agents.gpu.torch_backend import TorchService

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU stand-in devices only")

SEQUENCES = [[1, 5, 6, 7, 8], [1, 9, 9], [1, 4, 3, 2, 7, 7, 7]]


async def test_reward_scores_equal_the_checkpoint_model(checkpoints: dict[str, Path]) -> None:
    devices = discover_devices(2, 64)
    service = TorchService("rm", checkpoints["reward"], "reward")
    await service.prepare()
    chunk = chunk_of(devices, [0, 1])
    await service.restore(chunk)
    out = await service.execute(chunk, {"input_ids": SEQUENCES}, priority=0)
    reference = AutoModelForSequenceClassification.from_pretrained(checkpoints["reward"]).eval()
    with torch.inference_mode():
        expected = [float(reference(input_ids=torch.tensor([s])).logits[0, 0]) for s in SEQUENCES]
    assert out["scores"] == pytest.approx(expected, abs=1e-5)
    assert len(service.replicas[(0, 2)]) == 2  # a replica on each device of the chunk


async def test_teacher_logprobs_equal_the_checkpoint_model(checkpoints: dict[str, Path]) -> None:
    devices = discover_devices(1, 64)
    service = TorchService("teacher", checkpoints["teacher"], "logprobs")
    await service.prepare()
    chunk = chunk_of(devices, [0])
    await service.restore(chunk)
    out = await service.execute(chunk, {"input_ids": SEQUENCES}, priority=0)
    reference = AutoModelForCausalLM.from_pretrained(checkpoints["teacher"]).eval()
    for sequence, got in zip(SEQUENCES, out["logprobs"], strict=True):
        ids = torch.tensor([sequence])
        with torch.inference_mode():
            logp = torch.log_softmax(reference(input_ids=ids).logits[0, :-1], dim=-1)
        expected = logp.gather(1, ids[0, 1:].unsqueeze(1)).squeeze(1).tolist()
        assert len(got) == len(sequence) - 1
        assert got == pytest.approx(expected, abs=1e-4)


async def test_evict_drops_the_replicas_and_execute_then_refuses(
    checkpoints: dict[str, Path],
) -> None:
    devices = discover_devices(1, 64)
    service = TorchService("rm", checkpoints["reward"], "reward")
    await service.prepare()
    chunk = chunk_of(devices, [0])
    await service.restore(chunk)
    await service.evict(chunk)
    assert service.replicas == {}
    with pytest.raises(RuntimeError, match="not resident"):
        await service.execute(chunk, {"input_ids": [[1, 2]]}, priority=0)


@pytest.mark.parametrize(
    ("request_body", "field"),
    [
        ({}, "input_ids"),
        ({"input_ids": []}, "input_ids"),
        ({"input_ids": [[1, 2], []]}, r"input_ids\[1\]"),
        ({"input_ids": [[1, 100_000]]}, r"input_ids\[0\]"),
        ({"input_ids": [list(range(1, 200)) * 4]}, r"input_ids\[0\]: 796 tokens, at most 512"),
    ],
)
async def test_bad_requests_name_the_field(
    checkpoints: dict[str, Path], request_body: dict[str, object], field: str
) -> None:
    devices = discover_devices(1, 64)
    service = TorchService("rm", checkpoints["reward"], "reward")
    await service.prepare()
    chunk = chunk_of(devices, [0])
    await service.restore(chunk)
    with pytest.raises(ServiceError, match=field):
        await service.execute(chunk, request_body, priority=0)


async def test_weights_that_fail_to_load_raise_at_prepare(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')  # and no weights
    service = TorchService("broken", tmp_path, "reward")
    with pytest.raises(OSError):
        await service.prepare()


def test_a_checkpoint_without_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="checkpoint"):
        TorchService("rm", tmp_path, "reward")


def test_stand_ins_need_a_count_and_memory_and_form_one_nvlink_group() -> None:
    with pytest.raises(ValueError, match="count"):
        discover_devices(None, 64)
    with pytest.raises(ValueError, match="memory_mb"):
        discover_devices(4, None)
    devices = discover_devices(4, 64)
    assert [d.torch_device for d in devices] == ["cpu"] * 4
    assert nvlink_groups(devices) == [(0, 1, 2, 3)]


def test_chunks_are_aligned_buddies_on_this_node() -> None:
    devices = discover_devices(4, 64)
    assert chunk_of(devices, [2, 3]).key == (2, 2)
    with pytest.raises(ValueError, match="aligned"):
        chunk_of(devices, [1, 2])
    with pytest.raises(ValueError, match="consecutive"):
        chunk_of(devices, [0, 2])
    with pytest.raises(ValueError, match="not on this node"):
        chunk_of(devices, [4])


async def test_a_restore_after_an_eviction_reuses_the_device_block_and_structure(
    checkpoints: dict[str, Path],
) -> None:
    service = TorchService("reuse", checkpoints["reward"], "reward")
    await service.prepare()
    device = Device(7, "cpu", 64)
    chunk = Chunk(7, 1, (device,))
    await service.restore(chunk)
    first = await service.execute(chunk, {"input_ids": [[1, 2, 3]]}, 0)
    block = service._blocks[chunk.key][0][1]
    await service.evict(chunk)
    assert STANDIN_BLOCKS.cached_bytes(device) >= block.numel()
    await service.restore(chunk)  # the freed block and the module structure come back
    assert service._blocks[chunk.key][0][1].data_ptr() == block.data_ptr()
    assert await service.execute(chunk, {"input_ids": [[1, 2, 3]]}, 0) == first
    await service.close()
