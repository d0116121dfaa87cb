"""LLM-worker simulation (heddle §2–§7 scenarios; reused by DARTS single-turn GRPO rollouts).

Worker API (``workers.sim.llm.worker``) — everything runs on a
:class:`workers.sim.events.EventLoop`::

    from workers.sim.events import EventLoop
    from workers.sim.llm.worker import GenerationRequest, GenerationResult, LLMWorker, WorkerPool
    from workers.algorithms.heddle.latency_model import MPLatencyModel

    loop = EventLoop()
    model = MPLatencyModel()                       # PTL(batch, MP) from algorithms/latency.py
    pool = WorkerPool([
        LLMWorker(loop, i, per_token_seconds=lambda b: model.per_token_seconds(b, mp=1),
                  prefill_seconds_per_token=model.prefill_seconds_per_token,
                  max_batch=256, preemptive=False)
        for i in range(4)
    ])

    def done(result: GenerationResult) -> None:  # called at the virtual finish time
        print(result.request_id, result.finished_at, result.output_tokens, result.aborted)

    pool.submit(GenerationRequest("p0-s3", output_tokens=900, context_tokens=300,
                                  cache_key="p0", priority=0.0, on_done=done))   # least in-flight
    pool.submit(GenerationRequest("p1-s0", output_tokens=50), worker_id=2)        # pinned
    loop.after(1.0, lambda: pool.abort("p0-s3"))   # early stop: on_done gets aborted=True and
    loop.run()                                     # the tokens generated so far

- ``LLMWorker.submit(request)``: queue a :class:`GenerationRequest` (``output_tokens`` to decode,
  ``context_tokens`` of context to prefill unless cached under ``cache_key``, ``priority`` higher
  first). Continuous batching up to ``max_batch``; every running request advances one token per
  ``per_token_seconds(batch)``; prefill of uncached context stalls the batch.
- ``LLMWorker.abort(request_id) -> bool``; ``WorkerPool.abort`` fans out to all workers.
- ``on_done(GenerationResult)``: ``submitted_at``, ``first_scheduled_at``, ``finished_at``,
  ``queueing_seconds``, ``output_tokens`` (generated, also when aborted), ``prefill_tokens``,
  ``cached_tokens``, ``preemptions``, ``aborted``, ``tag``.
- ``LLMWorker.load`` / ``running_count`` / ``pending_count`` / ``stats`` (tokens, busy seconds),
  ``cached_tokens(key)``, ``insert_cache`` / ``drop_cache`` (KV migration).

The Heddle scenario on top: ``trajectories`` (coding/search/math generators, GRPO groups of 16,
JSONL traces), ``rollout`` (multi-step trajectories over a worker pool under a
:class:`~workers.sim.llm.rollout.SystemConfig` and :class:`~workers.sim.llm.rollout.Scenario`),
``baselines`` (verl-, verl*-, slime-like, Fix-1/Fix-8, Heddle, oracle predictor, lower bound),
``experiments`` (workload + trained predictors, Fig. 13 metrics, same-run comparisons).
"""
