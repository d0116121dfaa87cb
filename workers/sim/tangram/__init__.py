"""ARL-Tangram scenarios on the discrete-event simulator (DESIGN.md "The simulator").

- ``trace``: trajectories of LLM steps and actions; JSONL load/save (the recorded-run format).
- ``workloads``: generators for AI coding, MOPD and DeepSearch (every parameter documented).
- ``runner.TangramSimulation``: drives the production ``ElasticScheduler`` + topologies on
  ``workers.sim.events.EventLoop``; ``RateLimitedApi`` is the external API being protected.
- ``baselines``: static pods, isolated GPU services, naive API retries, lower bound (fixed DoP
  and ServerlessLLM-like runs are policies of the same scheduler).
- ``results``: per-action records and summaries.
"""
