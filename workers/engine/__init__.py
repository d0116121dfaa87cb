"""The LLM engines behind SGLang's HTTP surface (DESIGN.md "engine").

- :mod:`.core` — the emulated engine: continuous batching in real time, step times from
  ``workers.sim.llm``'s engine model, priority scheduling with preemption (heddle Alg. 1).
- :mod:`.llamacpp` — the CPU engine: llama.cpp decoding a GGUF model for real;
  :mod:`.tiny_model` writes the small model the project serves with it.
- :mod:`.openai_api` — request parsing and response shapes (OpenAI and SGLang ``/generate``).
- :mod:`.app` — the ASGI app; :mod:`.asgi` — plain-ASGI plumbing and the uvicorn server;
  ``python -m workers.engine --port 30000 [--backend llamacpp]`` serves one.
"""
