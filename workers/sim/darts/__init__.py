"""DARTS rollout scenario (darts §3.2, §4): heavy-tailed GRPO batches on the shared LLM-worker
simulation (``workers.sim.llm.worker``), shaped by ``workers.algorithms.darts``."""
