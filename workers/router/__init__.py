"""The OpenAI-compatible, trajectory-aware LLM router (DESIGN.md "router"; heddle §3–§5).

- :mod:`.app` — the HTTP surface (OpenAI endpoints, Loom's trajectory/request/worker endpoints).
- :mod:`.forward` — one step through the router: choose, forward, relay, account.
- :mod:`.policies` — Heddle (PPS priority, presorted-DP placement, re-route at tool boundaries)
  and the round-robin and least-load baselines.
- :mod:`.trajectories` — the in-memory trajectory table and progressive prediction.
- :mod:`.pool` — workers: health, drain, in-flight requests, abort fan-out.
- :mod:`.registry` — keys and trajectories from the control plane, state to it (Redis only).
- :mod:`.upstream` — the keep-alive HTTP/1.1 client to the workers.
- :mod:`.groups` (with :mod:`.group_request`, :mod:`.group_budget`) — DARTS group rollouts
  (``POST /v1/loom/groups``, darts §4): budget, allocation, fan-out, early-stop aborts, streaming.

``python -m workers.router --worker http://127.0.0.1:30000 --policy heddle``.
"""
