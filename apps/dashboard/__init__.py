"""Operator dashboard: SPA shell, login, the multiplexed `/ws/` consumer and `publish()`."""
