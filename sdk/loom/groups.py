"""DARTS group rollouts through Loom's router (darts §4): shapes the sync and async clients share.

``client.group_rollout(prompts, model=..., group_size=M, budget="adaptive")`` returns a
:class:`GroupRolloutStream`; iterate it for the kept samples as the router streams them (each as
soon as its place in its prompt's group is certain), then read its ``statistics`` — the group's
budget ``M_total``, per-prompt allocations, tail-pruned prompts, every candidate's length and
fate, and the next step's budget inputs. A group that cannot finish raises ``LoomError`` (its
text says ``retryable`` when a retry can succeed).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from loom.errors import LoomError

GROUPS = "/v1/loom/groups"
Prompt = str | Mapping[str, Any]  # text, or {"id"?, "prompt" | "messages"}


@dataclass(frozen=True)
class GroupSample:
    """One kept sample: which prompt (index and id), which candidate, its text and length."""

    prompt: int
    prompt_id: str
    sample: int
    text: str
    tokens: int
    finish_reason: str | None
    elapsed_s: float

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> GroupSample:
        return cls(
            prompt=int(event["prompt"]),
            prompt_id=str(event["prompt_id"]),
            sample=int(event["sample"]),
            text=str(event.get("text") or ""),
            tokens=int(event.get("tokens") or 0),
            finish_reason=event.get("finish_reason"),
            elapsed_s=float(event.get("elapsed_s") or 0.0),
        )


@dataclass(frozen=True)
class GroupTokens:
    """A piece of a candidate's text while it decodes (darts §4.3.2 token-level streaming):
    pieces of one ``(prompt, sample, draw)`` arrive in order; a later ``sample.dropped`` (see
    ``GroupRolloutStream.dropped``) voids them."""

    prompt: int
    sample: int
    draw: int
    text: str


TokensCallback = Callable[[GroupTokens], None]


def group_body(
    prompts: Sequence[Prompt],
    *,
    model: str,
    group_size: int,
    budget: str | Mapping[str, Any],
    sampling: Mapping[str, Any],
    stream: bool,
    token_chunk: int = 0,
) -> dict[str, Any]:
    """The endpoint's body; ``budget`` is a policy name or the whole budget object."""
    budget_object = {"policy": budget} if isinstance(budget, str) else dict(budget)
    body = {
        "model": model,
        "prompts": [p if isinstance(p, str) else dict(p) for p in prompts],
        "group_size": group_size,
        "budget": budget_object,
        "sampling": dict(sampling),
        "stream": stream,
    }
    if token_chunk:
        body["token_chunk"] = token_chunk
    return body


def group_error(error: Mapping[str, Any], status: int | None = None) -> LoomError:
    where = f"LLM router answered {status}: " if status else ""
    return LoomError(
        f"{where}{error.get('param') or ''} {error.get('code', 'error')}: "
        f"{error.get('message', '')}".strip()
        + (" (retryable)" if error.get("retryable") else "")
    )


class GroupRolloutStream:
    """Kept samples as they arrive (iterate), then ``statistics``; ``planned`` once the router
    has planned the group. The client's ``group_rollout`` fills it from the SSE lines."""

    def __init__(self, on_tokens: TokensCallback | None = None) -> None:
        self.on_tokens = on_tokens
        self.planned: dict[str, Any] | None = None
        self.statistics: dict[str, Any] | None = None
        self.dropped: list[dict[str, Any]] = []

    def take(self, line: str) -> GroupSample | None:
        """One SSE line: a kept sample, or None (other events are recorded here)."""
        if not line.startswith("data:"):
            return None
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return None
        event = json.loads(data)
        kind = event.get("type")
        if kind == "sample.kept":
            return GroupSample.from_event(event)
        if kind == "sample.tokens":
            if self.on_tokens is not None:
                self.on_tokens(GroupTokens(
                    int(event["prompt"]), int(event["sample"]), int(event["draw"]),
                    str(event["text"]),
                ))  # fmt: skip
        elif kind == "group.planned":
            self.planned = event
        elif kind == "sample.dropped":
            self.dropped.append(event)
        elif kind == "group.complete":
            self.statistics = event["statistics"]
        elif kind == "group.error":
            self.statistics = event.get("statistics")
            raise group_error(event["error"])
        return None

    def finished(self) -> None:
        if self.statistics is None:
            raise LoomError("the group's stream ended before the group completed; retry it")


def raise_for_group_status(status: int, body: bytes) -> None:
    if status < 400:
        return
    try:
        error = json.loads(body).get("error") or {}
    except ValueError:
        error = {"message": body[:200].decode(errors="replace")}
    raise group_error(error, status)


class GroupRollout(GroupRolloutStream):
    """The synchronous client's group rollout: ``for sample in rollout: ...``, then
    ``rollout.statistics``. Leaving the loop early closes the stream, which aborts every
    candidate still running on the engines."""

    def __init__(
        self,
        http: httpx.Client,
        body: dict[str, Any],
        api_key: str,
        on_tokens: TokensCallback | None = None,
    ) -> None:
        super().__init__(on_tokens)
        self._http, self._body, self._api_key = http, body, api_key

    def __iter__(self) -> Iterator[GroupSample]:
        headers = {"Authorization": f"Bearer {self._api_key}"}
        with self._http.stream("POST", GROUPS, json=self._body, headers=headers) as response:
            if response.status_code >= 400:
                raise_for_group_status(response.status_code, response.read())
            for line in response.iter_lines():
                sample = self.take(line)
                if sample is not None:
                    yield sample
        self.finished()


class AsyncGroupRollout(GroupRolloutStream):
    """The asyncio client's group rollout: ``async for sample in rollout: ...``."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        body: dict[str, Any],
        api_key: str,
        on_tokens: TokensCallback | None = None,
    ) -> None:
        super().__init__(on_tokens)
        self._http, self._body, self._api_key = http, body, api_key

    async def __aiter__(self) -> AsyncIterator[GroupSample]:
        headers = {"Authorization": f"Bearer {self._api_key}"}
        async with self._http.stream("POST", GROUPS, json=self._body, headers=headers) as response:
            if response.status_code >= 400:
                raise_for_group_status(response.status_code, await response.aread())
            async for line in response.aiter_lines():
                sample = self.take(line)
                if sample is not None:
                    yield sample
        self.finished()
