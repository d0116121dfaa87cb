"""The Celery app: configured from Django settings (CELERY_*), tasks found in each app's tasks.py.

Embedded mode (no REDIS_URL) runs tasks eagerly in the caller; with Redis they go to the broker.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings.dev")

app = Celery("loom")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
