"""Who may watch which live topic: the websocket twin of the REST API's object permissions.

An operator (``dashboard.view_dashboard``) watches every pool, node, job, GPU map, buffer and
rollout; an unknown object is
refused with "not found", the same answer the REST API gives (404), so ids cannot be probed.
"""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

from apps.dashboard.live.groups import ALL_JOBS, Topic, TopicKind
from apps.dashboard.roles import user_can_view


def topic_exists(topic: Topic) -> bool:
    """True when the pool, node, job, GPU pool or buffer a topic names is in the database."""
    from apps.buffers.models import Buffer
    from apps.dashboard.selectors_gpus import gpu_pools
    from apps.jobs.models import Job
    from apps.resources.models import Node, ResourcePool

    if topic.kind is TopicKind.POOL:
        return ResourcePool.objects.filter(name=topic.key).exists()
    if topic.kind is TopicKind.GPUS:
        return bool(gpu_pools(topic.key))
    if topic.kind is TopicKind.NODE:
        return Node.objects.filter(pk=topic.numeric_id).exists()
    if topic.kind is TopicKind.BUFFER:
        return Buffer.objects.filter(pk=topic.numeric_id).exists()
    if topic.kind is TopicKind.ROLLOUTS and topic.key == ALL_JOBS:
        return True
    return Job.objects.filter(pk=topic.numeric_id).exists()


def topic_authorize(user: AbstractBaseUser | AnonymousUser, topic: Topic) -> str | None:
    """None if ``user`` may subscribe to ``topic``, else the reason shown to the client."""
    if not user.is_authenticated:
        return "authentication required"
    if not user_can_view(user):
        return "forbidden: the dashboard needs the operator or admin role"
    if not topic_exists(topic):
        return f"not found: {topic}"
    return None
