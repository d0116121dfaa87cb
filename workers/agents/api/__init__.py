"""API agent: runs ``api`` dispatches, HTTP calls to rate-limited APIs (arl-tangram §5.1)."""

from workers.agents.api.agent import ApiAgent

__all__ = ["ApiAgent"]
