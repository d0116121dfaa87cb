"""The trainer's fluid forward queue under no, sample-level and token-level streaming."""

from __future__ import annotations

import numpy as np
import pytest

from workers.sim.darts.training import Timeline, TrainerModel, forward_finish, step_seconds

# Two samples: 10 tokens over [0, 10] and 10 tokens over [0, 100]; one second per token.
START = np.array([0.0, 0.0])
FINISH = np.array([10.0, 100.0])
TOKENS = np.array([10.0, 10.0])
ALL = np.array([True, True])


def finish(mode, streamable=ALL, kept=ALL):
    timeline = Timeline(START, FINISH, TOKENS, kept, streamable, np.array([100.0, 100.0]), 100.0)
    return forward_finish(mode, timeline, seconds_per_token=1.0)


def test_no_streaming_starts_after_rollout():
    assert finish("none") == pytest.approx(120.0)


def test_sample_streaming_overlaps_finished_samples():
    # the 10-token sample is forwarded during [10, 20]; the long one after it finishes at 100
    assert finish("sample") == pytest.approx(110.0)
    # a group that must wait for selection sends its kept samples at completion
    assert finish("sample", streamable=np.array([False, False])) == pytest.approx(120.0)


def test_token_streaming_leaves_only_the_last_chunk():
    # tokens arrive at 1/s and 0.1/s; the server keeps up, so it ends with the last token
    assert finish("token") == pytest.approx(100.0)
    assert finish("token") <= finish("sample") <= finish("none")


def test_token_streaming_pays_for_dropped_candidates():
    kept = np.array([True, False])
    # sample-level sends only kept output; token-level has forwarded both before the selection
    sample = finish("sample", streamable=np.array([False, False]), kept=kept)
    assert sample == pytest.approx(110.0)
    assert finish("token", kept=kept) == pytest.approx(100.0)


def test_step_adds_the_update_on_kept_tokens():
    trainer = TrainerModel()
    seconds = step_seconds(
        "none", trainer, Timeline(START, FINISH, TOKENS, ALL, ALL, FINISH, 100.0)
    )
    per_token = trainer.forward_seconds_per_token + trainer.update_seconds_per_token
    assert seconds == pytest.approx(100.0 + 20 * per_token)
    assert trainer.update_seconds_per_token == pytest.approx(3 * trainer.forward_seconds_per_token)
