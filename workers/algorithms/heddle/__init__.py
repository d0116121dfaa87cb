"""Heddle trajectory-centric rollout scheduling (heddle.txt §4–§6), pure algorithms.

- :mod:`.prediction` — progressive length prediction (§4.1): ``LengthPredictor`` protocol,
  ``PromptHistoryPredictor`` (prompt-only baseline), ``ProgressivePredictor`` (gradient-boosted
  trees over runtime features).
- :mod:`.priority` — PPS/LPT with preemption, FCFS, step round-robin, shortest-first (§4.2).
- :mod:`.placement` — presorted DP, formula 3, with short-trajectory aggregation (§5.2).
- :mod:`.migration` — re-rank with scaled partitions, transmission scheduler (§5.3).
- :mod:`.parallelism` — sort-initialised simulated annealing over MP degrees (§6.2).
- :mod:`.latency_model` — PTL(batch, MP), α(b), τ, prefill and KV-migration costs.

Everything takes plain data (ids, predicted lengths, worker states) and returns decisions: no
simulator types, no clock, no I/O, so the simulator and the live router share one implementation.
"""
