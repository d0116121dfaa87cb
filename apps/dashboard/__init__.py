"""Operator dashboard: the pages (SPA shell, login, their JSON endpoints, operator writes) and,
in ``live``, the live updates (the multiplexed ``/ws/`` consumer and what it publishes)."""
