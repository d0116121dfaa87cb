"""The CPU engine: llama.cpp serving a GGUF model, for machines without a GPU (DESIGN.md "engine").

Why llama.cpp (through ``llama-cpp-python``, built from source by pip): it is the one real LLM
engine that installs from the registries here and runs on a CPU without CUDA packages (vLLM and
SGLang pull CUDA builds of torch); it loads GGUF, a standard format the project can write itself
(``tiny_model``); decoding releases the GIL, so the event loop stays free while it runs.

The engine keeps the emulated engine's shape (``workers.engine.core``): ``submit`` / ``abort`` by
request id, requests whose ``progress`` the HTTP side awaits, pending requests ordered by
``priority`` (higher first, FIFO among equals: SGLang's ``--enable-priority-scheduling``), the same
counters. What differs is honest to the engine: ``slots`` sequences decode at once, each on its
own thread and ``Llama`` context (llama.cpp's Python binding decodes one sequence per context), and
a running request is never preempted (the binding cannot pause a sequence); an abort stops it at
the next token. The text is real tokens of the model, streamed as they decode.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.engine.core import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    EngineBusy,
    EngineRequest,
    PromptTooLong,
    RequestBook,
)
from workers.engine.openai_api import GenerationSpec


@dataclass(eq=False)
class TextRequest(EngineRequest):
    """An engine request with the text it decodes (``pieces``: one per token, UTF-8 decoded
    incrementally, so a multi-byte character lands whole in the piece that completes it)."""

    prompt: list[int] = field(default_factory=list, repr=False)
    temperature: float = 0.8
    seed: int = 0
    ignore_eos: bool = False
    pieces: list[str] = field(default_factory=list, repr=False)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


@dataclass(frozen=True)
class LlamaCppConfig:
    """``slots``: sequences decoded at once (each a thread and a llama.cpp context of
    ``context`` tokens); ``threads``: llama.cpp's threads per slot; ``default_max_tokens``: the
    length of a request that names none (OpenAI's completions API defaults too; the answer's
    ``finish_reason`` says ``length``)."""

    slots: int = 1
    context: int = 2048
    threads: int = 1
    default_max_tokens: int = 256

    def __post_init__(self) -> None:
        if min(self.slots, self.context, self.threads, self.default_max_tokens) < 1:
            raise ValueError("slots, context, threads and default_max_tokens must be >= 1")


class LlamaCppEngine(RequestBook):
    """A real engine over one GGUF model (module docstring)."""

    def __init__(self, model_path: Path, config: LlamaCppConfig | None = None) -> None:
        from llama_cpp import Llama  # the CPU engine's own dependency

        super().__init__()
        self.config = config or LlamaCppConfig()
        self.model_path = model_path
        self._contexts = [
            Llama(
                str(model_path),
                n_ctx=self.config.context,
                n_threads=self.config.threads,
                verbose=False,
            )
            for _ in range(self.config.slots)
        ]
        self.eos_token = self._contexts[0].token_eos()
        self._lock = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the slots (idempotent); requests are answered on the calling event loop."""
        if self._threads:
            return
        self._loop = asyncio.get_running_loop()
        for index, context in enumerate(self._contexts):
            thread = threading.Thread(
                target=self._slot, args=(context,), name=f"llamacpp-slot-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    async def stop(self) -> None:
        """Abort everything in flight and stop the slots."""
        self.abort_all()
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        for thread in self._threads:
            await asyncio.to_thread(thread.join)
        self._threads.clear()

    # ------------------------------------------------------------------ requests
    def tokenize(self, text: str) -> list[int]:
        return list(self._contexts[0].tokenize(text.encode("utf-8"), add_bos=True))

    def submit(
        self,
        rid: str,
        *,
        prompt: str | Sequence[int],
        max_tokens: int | None,
        priority: int = 0,
        temperature: float = 0.8,
        seed: int = 0,
        ignore_eos: bool = False,
    ) -> TextRequest:
        """Queue a request (from the event loop's thread). ``ignore_eos``: decode to
        ``max_tokens`` even past the end-of-sequence token (SGLang's sampling parameter of that
        name; what a benchmark on random weights needs)."""
        if rid in self._requests:
            raise EngineBusy(f"request id {rid!r} is already running")
        tokens = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        length = max_tokens if max_tokens is not None else self.config.default_max_tokens
        room = self.config.context - len(tokens)
        if room < 1:
            raise PromptTooLong(
                f"{len(tokens)} prompt tokens leave no room in the context of {self.config.context}"
            )
        if length > room:
            raise PromptTooLong(
                f"{length} tokens after {len(tokens)} prompt tokens exceed the context of "
                f"{self.config.context}",
                field="max_tokens",
            )
        request = TextRequest(
            rid=rid,
            prompt_tokens=len(tokens),
            max_tokens=length,
            priority=priority,
            stop_at_length_is_eos=False,
            arrival=time.monotonic(),
            prompt=tokens,
            temperature=temperature,
            seed=seed,
            ignore_eos=ignore_eos,
        )
        self._requests[rid] = request
        self.stats.prompt_tokens += request.prompt_tokens
        if length <= 0:
            self._finish(request, FINISH_LENGTH)
            return request
        with self._lock:
            self._pending.push(rid, priority)
            self._lock.notify()
        return request

    def submit_spec(self, rid: str, spec: GenerationSpec) -> TextRequest:
        """``submit`` for an HTTP request (``openai_api`` parsed it)."""
        return self.submit(
            rid, prompt=spec.prompt if isinstance(spec.prompt, str) else list(spec.prompt),
            max_tokens=spec.max_tokens, priority=spec.priority, temperature=spec.temperature,
            seed=spec.seed, ignore_eos=spec.ignore_eos,
        )  # fmt: skip

    def text(self, request: EngineRequest, start: int, end: int) -> str:
        """Tokens ``start..end-1`` of ``request``'s answer, as decoded."""
        assert isinstance(request, TextRequest)
        return "".join(request.pieces[start:end])

    def abort(self, rid: str) -> bool:
        """End a pending or running request now (unknown ids are a no-op, as in SGLang); a
        running one stops decoding at its next token."""
        request = self._requests.get(rid)
        if request is None:
            return False
        with self._lock:
            self._pending.remove(rid)
        self._finish(request, FINISH_ABORT)
        return True

    @property
    def kv_tokens(self) -> int:
        return sum(r.context_tokens for r in list(self._running.values()))

    @property
    def token_usage(self) -> float:
        return self.kv_tokens / (self.config.slots * self.config.context)

    # ------------------------------------------------------------------ event-loop side
    def _finish(self, request: EngineRequest, reason: str) -> None:
        """End ``request`` once (its slot's own end after an abort is a no-op)."""
        if request.finish_reason is None:
            self._running.pop(request.rid, None)
            self._end(request, reason)

    def _started(self, request: TextRequest) -> None:
        if request.finish_reason is None:
            self._running[request.rid] = request

    def _token(self, request: TextRequest, piece: str, seconds: float) -> None:
        if request.finish_reason is not None:
            return  # aborted meanwhile: the token is dropped
        if request.first_token_at is None:
            request.first_token_at = time.monotonic()
        request.pieces.append(piece)
        request.generated += 1
        self.stats.generation_tokens += 1
        self.stats.decode_token_seconds_sum += seconds
        self.stats.last_step_seconds = seconds
        request._notify()

    def _call(self, callback: Any, *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(callback, *args)

    # ------------------------------------------------------------------ slot threads
    def _next(self) -> TextRequest | None:
        with self._lock:
            while not self._stopping:
                while self._pending:
                    rid, _ = self._pending.pop()  # the highest priority, FIFO among equals
                    request = self._requests.get(str(rid))
                    if isinstance(request, TextRequest) and request.finish_reason is None:
                        return request
                self._lock.wait()
        return None

    def _slot(self, context: Any) -> None:
        while (request := self._next()) is not None:
            self._call(self._started, request)
            reason = self._decode(context, request)
            self._call(self._finish, request, reason)

    def _decode(self, context: Any, request: TextRequest) -> str:
        """Decode ``request`` on ``context`` until EOS, its length, or an abort."""
        context.set_seed(request.seed % 2**32)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        mark = time.perf_counter()
        tokens = context.generate(request.prompt, temp=request.temperature, reset=True)
        for produced, token in enumerate(tokens, start=1):
            if request.finish_reason is not None:
                return FINISH_ABORT
            now = time.perf_counter()
            if token == self.eos_token and not request.ignore_eos:
                return FINISH_STOP
            piece = decoder.decode(context.detokenize([token]))
            self._call(self._token, request, piece, now - mark)
            mark = now
            if produced >= request.max_tokens:
                return FINISH_LENGTH
        return FINISH_LENGTH
