"""The GRPO lab behind ``bench/darts_dynamics.py``: a 2.4M-parameter causal LM on CPU (width 256,
three layers), a pointer-chasing task with verifiable rewards, both of darts §3.2.2's tail patterns
and a long-tailed length distribution (``task``), a cached supervised warm-up and the GRPO loop
under standard, DARTS and Tail Batching sampling (``experiment``). A package, so
``python -m bench`` does not list it as a benchmark."""
