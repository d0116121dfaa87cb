"""A tiny GRPO lab for ``bench/darts_dynamics.py``: a few-hundred-thousand-parameter causal LM on
CPU, a synthetic verifiable task with verbose and necessary tails, and the GRPO loop with standard
or DARTS group sampling. A package, so ``python -m bench`` does not list it as a benchmark."""
