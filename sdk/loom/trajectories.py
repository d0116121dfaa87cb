"""Trajectory requests and answers the sync and async clients share: register a trajectory, read
it, end it with its reward (the REST API), and generate its LLM turns through Loom's router
(OpenAI's chat API with the trajectory named in ``X-Loom-Trajectory``, heddle §4: the router
predicts, prioritises and places by trajectory). The clients only do I/O; shapes live here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from loom.errors import LoomError
from loom.protocol import API_PREFIX, Request

TRAJECTORIES = f"{API_PREFIX}/trajectories"
TRAJECTORY_HEADER = "X-Loom-Trajectory"
CHAT = "/v1/chat/completions"
_PROGRESS = ("status", "tokens", "steps", "reward")


@dataclass(frozen=True)
class Trajectory:
    """A trajectory as Loom reports it: progress, prediction, worker and timings."""

    id: int
    job: int
    status: str
    tokens: int
    steps: int
    predicted_remaining_tokens: int | None
    llm_worker: str
    reward: float | None
    training_step: int = 0
    prompt_id: str = ""
    group_id: str = ""
    sample_index: int = 0
    generation_s: float = 0.0
    tool_s: float = 0.0
    total_s: float = 0.0

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> Trajectory:
        return cls(
            id=int(body["id"]),
            job=int(body["job"]),
            status=str(body["status"]),
            tokens=int(body["tokens"]),
            steps=int(body["steps"]),
            predicted_remaining_tokens=body.get("predicted_remaining_tokens"),
            llm_worker=str(body.get("llm_worker") or ""),
            reward=body.get("reward"),
            training_step=int(body.get("training_step", 0)),
            prompt_id=str(body.get("prompt_id", "")),
            group_id=str(body.get("group_id", "")),
            sample_index=int(body.get("sample_index", 0)),
            generation_s=float(body.get("generation_s", 0.0)),
            tool_s=float(body.get("tool_s", 0.0)),
            total_s=float(body.get("total_s", 0.0)),
        )


@dataclass(frozen=True)
class Turn:
    """One LLM turn: the text generated, its token counts, why it stopped."""

    text: str
    completion_tokens: int
    prompt_tokens: int
    finish_reason: str | None


def create_request(fields: Mapping[str, Any]) -> Request:
    return Request("POST", f"{TRAJECTORIES}/", json=dict(fields))


def get_request(trajectory_id: int) -> Request:
    return Request("GET", f"{TRAJECTORIES}/{trajectory_id}/")


def end_request(trajectory_id: int, status: str, reward: float | None) -> Request:
    body: dict[str, Any] = {"status": status}
    if reward is not None:
        body["reward"] = reward
    return Request("PATCH", f"{TRAJECTORIES}/{trajectory_id}/", json=body)


def router_end(trajectory_id: int, status: str) -> tuple[str, dict[str, Any]]:
    """The router's end of a trajectory (path, body): ``abort`` for an aborted one, else ``end``.

    Ending on the router before the REST API makes it publish the trajectory's final state,
    the only one carrying its step records (the length predictor's training data, heddle
    §4.1), and forget it; a trajectory ended on the REST API alone is refused by the router
    but its steps never reach the control plane."""
    if status == "aborted":
        return f"/v1/loom/trajectories/{trajectory_id}/abort", {}
    return f"/v1/loom/trajectories/{trajectory_id}/end", {"status": status}


def router_end_answered(response: httpx.Response) -> None:
    """A 404 is an answer too: the router never routed the trajectory (or already ended it)."""
    if response.status_code != 404:
        raise_for_llm_status(response)


def parse_trajectory(response: httpx.Response) -> Trajectory:
    return Trajectory.from_api(response.json())


def chat_body(
    model: str, messages: Sequence[Mapping[str, Any]], options: Mapping[str, Any], stream: bool
) -> dict[str, Any]:
    """An OpenAI chat body; ``options`` are OpenAI's and SGLang's sampling fields (max_tokens,
    temperature, seed, ignore_eos, ...), passed as they are (the router checks them)."""
    return {"model": model, "messages": list(messages), **options, "stream": stream}


def llm_headers(api_key: str, trajectory_id: int) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", TRAJECTORY_HEADER: str(trajectory_id)}


def parse_turn(response: httpx.Response) -> Turn:
    """A non-streaming chat answer; a router or engine error raised as ``LoomError``."""
    body = _json_or_error(response)
    choice = body["choices"][0]
    usage = body.get("usage") or {}
    return Turn(
        text=choice["message"].get("content") or "",
        completion_tokens=int(usage.get("completion_tokens", 0)),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        finish_reason=choice.get("finish_reason"),
    )


def stream_delta(line: str) -> str | None:
    """The text of one SSE line of a chat stream ('' for a line without text); None at the end.
    A mid-stream error event (a worker lost) is raised as ``LoomError``."""
    if not line.startswith("data:"):
        return ""
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return None
    event = json.loads(data)
    if "error" in event:
        error = event["error"]
        raise LoomError(
            f"{error.get('code', 'error')}: {error.get('message', '')}"
            + (" (retryable)" if error.get("retryable") else "")
        )
    choices = event.get("choices") or []
    return str((choices[0].get("delta") or {}).get("content") or "") if choices else ""


def raise_for_llm_status(response: httpx.Response) -> None:
    if response.status_code >= 400:
        _json_or_error(response)


def _json_or_error(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.status_code >= 400:
        error = body.get("error") or {}
        raise LoomError(
            f"LLM router answered {response.status_code}: "
            f"{error.get('param') or ''} {error.get('message') or response.text[:200]}".strip()
        )
    return dict(body)
