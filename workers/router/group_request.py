"""The body of ``POST /v1/loom/groups`` (darts §4 on the live path), checked field by field.

```json
{"model": "tiny",
 "prompts": ["text", {"id": "q17", "messages": [...]}, {"prompt": "text"}],
 "group_size": 8,
 "budget": {"policy": "adaptive", "target_multiple": 1.5, "longest": 1, "tail_pruning": true},
 "sampling": {"max_tokens": 512, "temperature": 1.0, "seed": 3},
 "stream": true, "token_chunk": 64}
```

``budget.policy``: ``adaptive`` (Eq. 9's total, λ calibrated once per job so that its first
adaptive group draws ``target_multiple·N·M``, App. B), ``fixed`` (``budget.total`` candidates,
within ``[N·M, 2·N·M]``), ``standard`` (``M`` per prompt, all kept: GRPO without shaping).
A prompt's ``id`` keys its length-variance history across steps; without one it is the hash of
its content, so a trainer re-sending the same prompt next epoch finds its history.
``token_chunk`` (streamed groups only; 0, the default, sends none): every candidate's text in
chunks of about that many tokens as it decodes (darts §4.3.2 token-level streaming, so a trainer
can run forward passes on prefixes while the suffixes decode). Every error names its field (HTTP
400), never a silent default.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from workers.engine.openai_api import BadRequest, GenerationSpec, parse_chat, parse_completion
from workers.router.forward import RouterError

POLICIES = ("adaptive", "fixed", "standard")
MAX_CANDIDATES = 4096  # candidates one group may put on the workers at its largest budget
DEFAULT_TARGET_MULTIPLE = 1.5  # darts App. B: the solved budget averages about 1.5·N·M
# OpenAI and SGLang sampling fields a group passes to each candidate; the rest are the group's.
SAMPLING_FIELDS = frozenset(
    {"max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "ignore_eos", "stop"}
)


@dataclass(frozen=True)
class GroupPrompt:
    prompt_id: str
    path: str  # "/v1/chat/completions" or "/v1/completions"
    body: dict[str, Any]  # the candidates' request body, without rid/seed/stream
    spec: GenerationSpec


@dataclass(frozen=True)
class GroupRequest:
    model: str
    prompts: tuple[GroupPrompt, ...]
    group_size: int
    policy: str
    total: int | None
    target_multiple: float
    longest: int
    tail_pruning: bool
    seed: int | None
    stream: bool
    group_id: str | None
    token_chunk: int = 0

    @property
    def upper_candidates(self) -> int:
        per_prompt = self.group_size if self.policy == "standard" else 2 * self.group_size
        return len(self.prompts) * per_prompt


def _bad(field: str, reason: str, code: str = "invalid") -> RouterError:
    return RouterError(400, field, reason, code)


def _int(body: dict[str, Any], name: str, field: str, *, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(field, f"must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise _bad(field, f"must be >= {minimum}, got {value}")
    return value


def _prompt(entry: Any, index: int, model: str, sampling: dict[str, Any]) -> GroupPrompt:
    field = f"prompts[{index}]"
    if isinstance(entry, str):
        entry = {"prompt": entry}
    if not isinstance(entry, dict):
        raise _bad(field, "must be a string or an object with 'prompt' or 'messages'")
    unknown = set(entry) - {"id", "prompt", "messages"}
    if unknown:
        raise _bad(f"{field}.{sorted(unknown)[0]}", "unknown field (id, prompt or messages)")
    if ("prompt" in entry) == ("messages" in entry):
        raise _bad(field, "give exactly one of 'prompt' (text) or 'messages' (chat)")
    chat = "messages" in entry
    content = {"messages": entry["messages"]} if chat else {"prompt": entry["prompt"]}
    body = {"model": model, **content, **sampling}
    try:
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        spec = (parse_chat if chat else parse_completion)(streamed)
    except BadRequest as exc:
        where = exc.param if exc.param in SAMPLING_FIELDS else f"{field}.{exc.param}"
        raise RouterError(exc.status, where, exc.message, exc.code) from None
    prompt_id = entry.get("id")
    if prompt_id is None:
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
        prompt_id = hashlib.sha256(canonical.encode()).hexdigest()[:24]
    elif not isinstance(prompt_id, str) or not prompt_id:
        raise _bad(f"{field}.id", "must be a non-empty string")
    path = "/v1/chat/completions" if chat else "/v1/completions"
    return GroupPrompt(prompt_id=prompt_id, path=path, body=body, spec=spec)


def _budget(raw: Any, prompts: int, group_size: int) -> tuple[str, int | None, float, int, bool]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _bad("budget", "must be an object with a 'policy'")
    unknown = set(raw) - {"policy", "total", "target_multiple", "longest", "tail_pruning"}
    if unknown:
        raise _bad(f"budget.{sorted(unknown)[0]}", "unknown field")
    policy = raw.get("policy", "adaptive")
    if policy not in POLICIES:
        raise _bad("budget.policy", f"unknown budget policy {policy!r}; one of {POLICIES}")
    low, high = prompts * group_size, 2 * prompts * group_size
    total = _int(raw, "total", "budget.total", minimum=1)
    if policy == "fixed":
        if total is None:
            raise _bad("budget.total", "required by the fixed policy", "missing")
        if not low <= total <= high:
            raise _bad("budget.total", f"must be within [N·M, 2·N·M] = [{low}, {high}]")
    elif total is not None:
        raise _bad("budget.total", f"only the fixed policy takes a total, not {policy!r}")
    multiple = raw.get("target_multiple", DEFAULT_TARGET_MULTIPLE)
    if isinstance(multiple, bool) or not isinstance(multiple, (int, float)):
        raise _bad("budget.target_multiple", "must be a number")
    if not 1.0 <= multiple <= 2.0:
        raise _bad("budget.target_multiple", f"must be within [1, 2], got {multiple}")
    longest = _int(raw, "longest", "budget.longest", minimum=0)
    longest = 1 if longest is None else longest  # darts §5.6: L = 1
    if longest > group_size:
        raise _bad("budget.longest", f"must be <= group_size ({group_size})")
    pruning = raw.get("tail_pruning", True)
    if not isinstance(pruning, bool):
        raise _bad("budget.tail_pruning", "must be a boolean")
    return policy, total, float(multiple), longest, pruning


def parse_group(body: Any, models: tuple[str, ...]) -> GroupRequest:
    if not isinstance(body, dict):
        raise _bad("body", "must be a JSON object")
    unknown = set(body) - {
        "model", "prompts", "group_size", "budget", "sampling", "stream", "id", "token_chunk",
    }  # fmt: skip
    if unknown:
        raise _bad(sorted(unknown)[0], "unknown field")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "required: the model to generate with", "missing")
    if model not in models:
        raise RouterError(
            404, "model", f"the model {model!r} does not exist; served: {', '.join(models)}",
            "model_not_found",
        )  # fmt: skip
    group_size = _int(body, "group_size", "group_size", minimum=1)
    if group_size is None:
        raise _bad("group_size", "required: M, the samples each prompt's group keeps", "missing")
    prompts = body.get("prompts")
    if not isinstance(prompts, list) or not prompts:
        raise _bad("prompts", "required: a non-empty list of prompts", "missing")
    policy, total, multiple, longest, pruning = _budget(
        body.get("budget"), len(prompts), group_size
    )
    sampling = body.get("sampling") or {}
    if not isinstance(sampling, dict):
        raise _bad("sampling", "must be an object")
    unknown = set(sampling) - SAMPLING_FIELDS
    if unknown:
        raise _bad(f"sampling.{sorted(unknown)[0]}", f"not one of {sorted(SAMPLING_FIELDS)}")
    seed = _int(sampling, "seed", "sampling.seed", minimum=0)
    per_candidate = {k: v for k, v in sampling.items() if k != "seed"}
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream", "must be a boolean")
    token_chunk = _int(body, "token_chunk", "token_chunk", minimum=0) or 0
    if token_chunk and not stream:
        raise _bad("token_chunk", "token chunks need a streamed answer (stream: true)")
    group_id = body.get("id")
    if group_id is not None and (not isinstance(group_id, str) or not group_id):
        raise _bad("id", "must be a non-empty string")
    request = GroupRequest(
        model=model,
        prompts=tuple(_prompt(p, i, model, per_candidate) for i, p in enumerate(prompts)),
        group_size=group_size,
        policy=policy,
        total=total,
        target_multiple=multiple,
        longest=longest,
        tail_pruning=pruning,
        seed=seed,
        stream=stream,
        group_id=group_id,
        token_chunk=token_chunk,
    )
    if request.upper_candidates > MAX_CANDIDATES:
        raise _bad(
            "prompts",
            f"{len(prompts)} prompts x up to {request.upper_candidates // len(prompts)} "
            f"candidates exceed the {MAX_CANDIDATES} one group may run; split the batch",
            "too_many_samples",
        )
    return request
