"""Operator commands sent over the websocket (``{"op": "command", "name": ..., "args": ...}``).

The same service functions as the REST views, the same permission check: a read-only operator is
refused here exactly as the REST API refuses them ("UI and websocket both refuse").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

from apps.dashboard import services
from apps.dashboard.roles import user_can_operate
from apps.metrics.instruments import WS_REFUSALS

User = AbstractBaseUser | AnonymousUser
Outcome = dict[str, Any]


def _int_arg(args: dict[str, Any], name: str) -> int:
    value = args.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise services.DashboardInputError([{"field": f"args.{name}", "reason": "must be an id"}])
    return value


def _policy_update(user: User, args: dict[str, Any]) -> Outcome:
    from apps.resources.models import ResourcePool

    pool = ResourcePool.objects.filter(name=str(args.get("pool", ""))).first()
    if pool is None:
        raise services.DashboardInputError([{"field": "args.pool", "reason": "unknown pool"}])
    policy = services.dashboard_policy_save(user=user, pool=pool, settings=args.get("settings"))
    return {"version": policy.version}


def _action_cancel(user: User, args: dict[str, Any]) -> Outcome:
    from apps.actions.models import Action

    action = Action.objects.select_related("job").filter(pk=_int_arg(args, "action")).first()
    if action is None:
        raise services.DashboardInputError([{"field": "args.action", "reason": "not found"}])
    return {"cancelled": services.dashboard_action_cancel(user=user, action=action)}


def _node_drain(draining: bool) -> Callable[[User, dict[str, Any]], Outcome]:
    def run(user: User, args: dict[str, Any]) -> Outcome:
        from apps.resources.models import Node

        node = Node.objects.filter(pk=_int_arg(args, "node")).first()
        if node is None:
            raise services.DashboardInputError([{"field": "args.node", "reason": "not found"}])
        node = services.dashboard_node_set_draining(user=user, node=node, draining=draining)
        return {"status": node.status}

    return run


COMMANDS: dict[str, Callable[[User, dict[str, Any]], Outcome]] = {
    "policy.update": _policy_update,
    "action.cancel": _action_cancel,
    "node.drain": _node_drain(True),
    "node.resume": _node_drain(False),
}


def command_run(*, user: User, name: object, args: object) -> Outcome:
    """Run one command; always returns ``{"ok": bool, ...}`` (never raises to the socket)."""
    if not isinstance(name, str) or name not in COMMANDS:
        return {"ok": False, "reason": f"unknown command {name!r}; known: {', '.join(COMMANDS)}"}
    if not user_can_operate(user):
        WS_REFUSALS.labels("command").inc()
        return {"ok": False, "reason": "forbidden: the read-only operator role cannot run " + name}
    if not isinstance(args, dict):
        return {"ok": False, "errors": [{"field": "args", "reason": "must be an object"}]}
    try:
        return {"ok": True, **COMMANDS[name](user, args)}
    except services.DashboardForbidden as refusal:
        WS_REFUSALS.labels("command").inc()
        return {"ok": False, "reason": str(refusal)}
    except services.DashboardInputError as error:
        return {"ok": False, "errors": error.errors}
