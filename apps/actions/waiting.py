"""Waiting for actions to end: the one sequence every long-poll of the API follows.

Subscribe to the end first (``notify``), then read; wait only while the action is still active,
holding no database connection; then catch up with what its end committed. An end that commits
between the read and the wait still wakes the waiter, and no answer predates the end's commit.

The three long-polls: submit-and-wait (``services.action_submit_and_wait``, subscribed through
:class:`SubmitWait` before the scheduler hears of the new action), one result
(:func:`action_result_await`) and any of many (:func:`actions_ended_await`).
"""

from __future__ import annotations

import contextlib
from types import TracebackType

from django.db import connection
from django.http import Http404
from rest_framework import status

from apps.actions import hot_path, selectors
from apps.actions.models import TERMINAL_STATUSES, Action
from apps.actions.notify import Subscription, get_notifier
from apps.jobs.access import Principal
from controlplane.api.errors import ApiError
from controlplane.http_bridge import Hangup


def release_connection() -> None:
    """Give the database connection back while a long-poll waits (it may wait 60 s), so that
    waiting requests never exhaust PostgreSQL's connections; the re-read takes a fresh one."""
    if not connection.in_atomic_block:
        connection.close()


def wait_for_end(subscription: Subscription, *, seconds: float, hangup: Hangup | None) -> None:
    """A long-poll's wait, holding no database connection: until an end is published,
    ``seconds`` pass, or the client hangs up (``controlplane.http_bridge.Hangup``: its thread
    is free at once; the answer is dropped)."""
    release_connection()
    if hangup is not None:
        hangup.on_hangup(subscription.wake)
    subscription.wait(seconds)


def catch_up(action: Action, subscription: Subscription) -> None:
    """After a long-poll: what changed on the action since it was read — as its end committed
    it, when the ender published the row (no read), else read back (one statement); 404 if it
    was deleted meanwhile (its job deleted)."""
    progress = subscription.progress_of(action.pk)
    if progress is not None:
        hot_path.apply_progress(action, progress)
        return
    try:
        hot_path.refresh_progress(action)
    except Action.DoesNotExist:
        raise Http404(f"action {action.pk} was deleted") from None


def _until_ended(
    action: Action, subscription: Subscription, *, seconds: float, hangup: Hangup | None
) -> None:
    if not action.is_terminal:
        wait_for_end(subscription, seconds=seconds, hangup=hangup)
        catch_up(action, subscription)


class SubmitWait:
    """Submit-and-wait: ``subscribe`` is the submission's ``before_announce`` hook, so the new
    action's end cannot slip past the wait; ``until_ended`` then waits and catches up."""

    def __init__(self, *, seconds: float, hangup: Hangup | None) -> None:
        self.seconds = seconds
        self.hangup = hangup
        self._subscriptions = contextlib.ExitStack()
        self._subscription: Subscription | None = None

    def __enter__(self) -> SubmitWait:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._subscriptions.close()

    def subscribe(self, action: Action) -> None:
        if self.seconds > 0:
            subscription = get_notifier().subscribe(action.pk)
            self._subscription = self._subscriptions.enter_context(subscription)

    def until_ended(self, action: Action) -> None:
        if self._subscription is not None:
            _until_ended(action, self._subscription, seconds=self.seconds, hangup=self.hangup)


def action_result_await(
    *, principal: Principal, action_id: int, seconds: float, hangup: Hangup | None
) -> Action:
    """The action for its result, once it has ended or ``seconds`` have passed; 404 if not
    visible."""
    if seconds <= 0:
        return selectors.action_result_get(principal=principal, action_id=action_id)
    # Subscribe first, then read: an end that commits after the read still wakes us.
    with get_notifier().subscribe(action_id) as subscription:
        action = selectors.action_result_get(principal=principal, action_id=action_id)
        _until_ended(action, subscription, seconds=seconds, hangup=hangup)
    return action


def actions_ended_await(
    *, principal: Principal, action_ids: list[int], seconds: float, hangup: Hangup | None
) -> list[Action]:
    """Those of ``action_ids`` that have ended, once any has or ``seconds`` have passed (maybe
    none); 404 naming the first id the principal cannot see."""
    visible = selectors.action_results(principal=principal, action_ids=action_ids)
    found = set(visible.values_list("pk", flat=True))
    missing = [index for index, pk in enumerate(action_ids) if pk not in found]
    if missing:
        raise ApiError(
            field=f"ids[{missing[0]}]",
            reason=f"no action {action_ids[missing[0]]} visible to this key",
            status_code=status.HTTP_404_NOT_FOUND,
        )
    ended = list(visible.filter(status__in=TERMINAL_STATUSES))
    if not ended and seconds > 0:
        with get_notifier().subscribe(*action_ids) as subscription:
            ended = list(visible.filter(status__in=TERMINAL_STATUSES))
            if not ended:
                wait_for_end(subscription, seconds=seconds, hangup=hangup)
                ended = list(visible.filter(status__in=TERMINAL_STATUSES))
    return ended
