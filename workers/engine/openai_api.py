"""The request and response shapes the emulated engine shares with SGLang's HTTP server.

OpenAI ``/v1/chat/completions`` and ``/v1/completions`` (with SGLang's extra ``rid`` and
``priority`` fields), and SGLang's native ``/generate`` (``text``, ``sampling_params``, ``rid``,
``priority``). Bad input raises :class:`BadRequest` naming the field, answered in OpenAI's error
shape (``{"error": {"message", "type", "param", "code"}}``), as SGLang answers it.

The emulated engine answers deterministic filler (token ``i`` of a response is always the same
word, so tests and benchmarks can check what arrived) and counts a prompt's tokens as its
whitespace-separated words (it only needs a length); the CPU engine (``llamacpp``) tokenizes the
prompt the spec carries and answers the text it decodes. Responses take their text from the
engine (``text_of``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_FILLER = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit")


class BadRequest(ValueError):
    """A client error about one field (HTTP ``status``, OpenAI error ``code``)."""

    def __init__(
        self, param: str, message: str, *, status: int = 400, code: str = "invalid_request_error"
    ):
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message
        self.status = status
        self.code = code


def error_body(
    message: str, *, param: str | None, code: str, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    """OpenAI's error object (what the ``openai`` client parses into ``APIStatusError``)."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def filler_text(start: int, end: int) -> str:
    """Tokens ``start..end-1`` of every response (each token one word with a leading space)."""
    return "".join(" " + _FILLER[i % len(_FILLER)] for i in range(start, end))


def count_tokens(text: str) -> int:
    return len(text.split())


_ids = itertools.count()


@dataclass(frozen=True)
class GenerationSpec:
    """What a request asks the engine for, whatever endpoint it came through."""

    kind: str  # "chat" | "completion" | "generate"
    model: str | None
    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    rid: str | None
    priority: int
    # What a real engine needs beyond a length: the prompt (text, a rendered chat, or token ids)
    # and the sampling parameters OpenAI's and SGLang's requests carry.
    prompt: str | tuple[int, ...] = ""
    temperature: float = 1.0
    seed: int = 0
    ignore_eos: bool = False


TextOf = Callable[[int, int], str]  # the engine's text of a response's tokens start..end-1


def _int_field(body: dict[str, Any], name: str, *, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(name, f"must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise BadRequest(name, f"must be >= {minimum}, got {value}")
    return value


def _bool_field(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(name, f"must be a boolean, got {type(value).__name__}")
    return value


def _common(body: dict[str, Any]) -> tuple[str | None, int, str | None]:
    rid = body.get("rid")
    if rid is not None and (not isinstance(rid, str) or not rid):
        raise BadRequest("rid", "must be a non-empty string")
    priority = _int_field(body, "priority", minimum=-(2**62))
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("model", "must be a string")
    return rid, priority or 0, model


def _max_tokens(body: dict[str, Any]) -> int | None:
    chosen = _int_field(body, "max_completion_tokens", minimum=0)
    return chosen if chosen is not None else _int_field(body, "max_tokens", minimum=0)


def _n(body: dict[str, Any]) -> None:
    n = _int_field(body, "n", minimum=1)
    if n not in (None, 1):
        raise BadRequest("n", "only n = 1 is supported (one choice per request)")


def _usage_option(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise BadRequest("stream_options", "must be an object")
    return bool(options.get("include_usage", False))


def _sampling(body: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``temperature`` (0..2), ``seed`` and SGLang's ``ignore_eos`` from ``body``."""
    temperature = body.get("temperature", 1.0)
    if temperature is None:
        temperature = 1.0
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise BadRequest(where + "temperature", "must be a number")
    if not 0.0 <= temperature <= 2.0:
        raise BadRequest(where + "temperature", f"must be between 0 and 2, got {temperature}")
    seed = _int_field(body, "seed", minimum=0)
    ignore_eos = _bool_field(body, "ignore_eos")
    return {"temperature": float(temperature), "seed": seed or 0, "ignore_eos": ignore_eos}


def render_chat(messages: list[dict[str, Any]]) -> str:
    """A chat as one prompt, for a model without a chat template: ``role: content`` lines, then
    the assistant's turn (SGLang applies the model's own template instead)."""
    lines = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                part["text"]
                for part in content
                if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
        lines.append(f"{message['role']}: {content or ''}")
    return "\n".join(lines) + "\nassistant:"


def parse_chat(body: Any) -> GenerationSpec:
    if not isinstance(body, dict):
        raise BadRequest("body", "must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages", "required: a non-empty list of messages")
    tokens = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest(f"messages[{index}]", "must be an object with a string 'role'")
        content = message.get("content")
        if isinstance(content, str):
            tokens += count_tokens(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    tokens += count_tokens(part["text"])
        elif content is not None:
            raise BadRequest(f"messages[{index}].content", "must be a string or a list of parts")
        tokens += 4  # role and separators, as chat templates add
    _n(body)
    rid, priority, model = _common(body)
    return GenerationSpec(
        "chat", model, tokens, _max_tokens(body), _bool_field(body, "stream"),
        _usage_option(body), rid, priority, render_chat(messages), **_sampling(body),
    )  # fmt: skip


def _prompt_tokens(prompt: Any, field: str) -> int:
    if isinstance(prompt, str):
        return count_tokens(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        return len(prompt)  # token ids
    if isinstance(prompt, list) and len(prompt) == 1:
        return _prompt_tokens(prompt[0], f"{field}[0]")
    raise BadRequest(field, "must be a string or a list of token ids (one prompt per request)")


def _prompt_of(prompt: Any) -> str | tuple[int, ...]:
    """The one prompt (already checked by ``_prompt_tokens``): its text or its token ids."""
    if isinstance(prompt, list) and len(prompt) == 1 and not isinstance(prompt[0], int):
        return _prompt_of(prompt[0])
    return prompt if isinstance(prompt, str) else tuple(prompt)


def parse_completion(body: Any) -> GenerationSpec:
    if not isinstance(body, dict):
        raise BadRequest("body", "must be a JSON object")
    if "prompt" not in body:
        raise BadRequest("prompt", "required")
    tokens = _prompt_tokens(body["prompt"], "prompt")
    _n(body)
    rid, priority, model = _common(body)
    return GenerationSpec(
        "completion", model, tokens, _max_tokens(body), _bool_field(body, "stream"),
        _usage_option(body), rid, priority, _prompt_of(body["prompt"]), **_sampling(body),
    )  # fmt: skip


def parse_generate(body: Any) -> GenerationSpec:
    """SGLang's native ``/generate``: ``text`` or ``input_ids``, ``sampling_params``."""
    if not isinstance(body, dict):
        raise BadRequest("body", "must be a JSON object")
    if "text" in body:
        tokens = _prompt_tokens(body["text"], "text")
        prompt = _prompt_of(body["text"])
    elif "input_ids" in body:
        tokens = _prompt_tokens(body["input_ids"], "input_ids")
        prompt = _prompt_of(body["input_ids"])
    else:
        raise BadRequest("text", "required (or input_ids)")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise BadRequest("sampling_params", "must be an object")
    max_new = _int_field(params, "max_new_tokens", minimum=0)
    rid, priority, model = _common(body)
    return GenerationSpec(
        "generate", model, tokens, max_new, _bool_field(body, "stream"), False, rid, priority,
        prompt, **_sampling(params, "sampling_params."),
    )  # fmt: skip


def new_request_id() -> str:
    return f"{time.monotonic_ns():x}{next(_ids):x}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def full_response(
    spec: GenerationSpec,
    rid: str,
    model: str,
    generated: int,
    finish_reason: str,
    created: int,
    text_of: TextOf = filler_text,
    prompt_tokens: int | None = None,
) -> dict[str, Any]:
    """The non-streaming answer of any endpoint (``prompt_tokens``: the engine's own count,
    when it tokenized the prompt)."""
    text = text_of(0, generated)
    prompt_tokens = spec.prompt_tokens if prompt_tokens is None else prompt_tokens
    if spec.kind == "generate":
        return {
            "text": text,
            "meta_info": {
                "id": rid,
                "finish_reason": {"type": finish_reason, "length": generated},
                "prompt_tokens": prompt_tokens,
                "completion_tokens": generated,
            },
        }
    if spec.kind == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish_reason,
            "logprobs": None,
        }
        kind = "chat.completion"
        prefix = "chatcmpl-"
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
        kind = "text_completion"
        prefix = "cmpl-"
    return {
        "id": prefix + rid,
        "object": kind,
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage(prompt_tokens, generated),
    }


def stream_chunk(
    spec: GenerationSpec,
    rid: str,
    model: str,
    start: int,
    end: int,
    finish_reason: str | None,
    created: int,
    text_of: TextOf = filler_text,
    prompt_tokens: int | None = None,
) -> dict[str, Any]:
    """One SSE event carrying tokens ``start..end-1`` (and the finish reason on the last)."""
    if spec.kind == "generate":
        return {
            "text": text_of(0, end),  # SGLang streams the cumulative text
            "meta_info": {
                "id": rid,
                "finish_reason": None
                if finish_reason is None
                else {"type": finish_reason, "length": end},
                "prompt_tokens": spec.prompt_tokens if prompt_tokens is None else prompt_tokens,
                "completion_tokens": end,
            },
        }
    if spec.kind == "chat":
        delta: dict[str, Any] = {"content": text_of(start, end)}
        if start == 0:
            delta["role"] = "assistant"
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return {
            "id": "chatcmpl-" + rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
        }
    return {
        "id": "cmpl-" + rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text_of(start, end), "finish_reason": finish_reason}],
    }


def usage_chunk(
    spec: GenerationSpec,
    rid: str,
    model: str,
    generated: int,
    created: int,
    prompt_tokens: int | None = None,
) -> dict[str, Any]:
    """The final ``stream_options.include_usage`` event: no choices, the usage."""
    prompt_tokens = spec.prompt_tokens if prompt_tokens is None else prompt_tokens
    kind = "chat.completion.chunk" if spec.kind == "chat" else "text_completion"
    prefix = "chatcmpl-" if spec.kind == "chat" else "cmpl-"
    return {
        "id": prefix + rid,
        "object": kind,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(prompt_tokens, generated),
    }
