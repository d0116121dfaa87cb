"""LLM-worker simulation (heddle §2–§7 scenarios; reused by DARTS single-turn GRPO rollouts).

Worker API (``workers.sim.llm.worker``) — everything runs on a
:class:`workers.sim.events.EventLoop`::

    from workers.sim.events import EventLoop
    from workers.sim.llm.cost import ContextCost
    from workers.sim.llm.latency import ContextLatencyModel
    from workers.sim.llm.worker import GenerationRequest, GenerationResult, LLMWorker, WorkerPool

    loop = EventLoop()
    engine = ContextLatencyModel()                 # Qwen3-14B on H100s, fitted to published ITL
    pool = WorkerPool([LLMWorker(loop, i, cost=ContextCost(engine, mp=1), max_batch=48)
                       for i in range(4)])
    # legacy model (per-token time from the batch size only, stalling prefill, unbounded KV):
    # LLMWorker(loop, 0, per_token_seconds=lambda b: 0.012, prefill_seconds_per_token=1e-4)

    def done(result: GenerationResult) -> None:  # called at the virtual finish time
        print(result.request_id, result.finished_at, result.output_tokens, result.aborted)

    pool.submit(GenerationRequest("p0-s3", output_tokens=900, context_tokens=300,
                                  cache_key="p0", priority=0.0, on_done=done))   # least in-flight
    pool.submit(GenerationRequest("p1-s0", output_tokens=50), worker_id=2)        # pinned
    loop.after(1.0, lambda: pool.abort("p0-s3"))   # early stop: on_done gets aborted=True and
    loop.run()                                     # the tokens generated so far

- ``LLMWorker.submit(request)``: queue a :class:`GenerationRequest` (``output_tokens`` to decode,
  ``context_tokens`` of context to prefill unless cached under ``cache_key``, ``priority`` higher
  first). Continuous batching up to ``max_batch`` (and, in the context model, the KV pool).
- ``LLMWorker.abort(request_id) -> bool``; ``WorkerPool.abort`` fans out to all workers.
- ``on_done(GenerationResult)``: ``submitted_at``, ``first_scheduled_at``, ``finished_at``,
  ``queueing_seconds``, ``output_tokens`` (generated, also when aborted), ``prefill_tokens``,
  ``cached_tokens``, ``preemptions``, ``aborted``, ``tag``.
- ``LLMWorker.load`` / ``running_count`` / ``pending_count`` / ``stats`` (tokens, busy seconds,
  preemptions), ``cached_tokens(key)``, ``insert_cache`` / ``drop_cache`` (KV migration).

The Heddle scenario on top: ``latency`` + ``cost`` + ``kv`` (the two engine models),
``trajectories`` (coding/search/math generators, GRPO groups of 16, JSONL traces), ``routing``
(the sgl-router cache-aware policy), ``profiler`` (what Heddle's planners believe), ``systems``
and ``rollout`` (multi-step trajectories over a worker pool under a
:class:`~workers.sim.llm.systems.SystemConfig` and :class:`~workers.sim.llm.systems.Scenario`),
``baselines`` (verl, verl*, slime, Fix-m, Heddle, oracle predictor, lower bounds),
``experiments`` (workload + trained predictors, Fig. 13 metrics, same-run comparisons, MP sweeps).
"""
