"""pytest: the embedded mode whatever the shell says, fast hashing, DATABASE_URL honoured.

Tests that need the real Redis read LOOM_TEST_REDIS_URL (default redis://127.0.0.1:6379/15) and
switch modes themselves, so a REDIS_URL left in the environment never changes the suite.
"""

import os

from controlplane.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
REDIS_URL = None
LOOM_EMBEDDED = True
LOOM_TRANSPORT = "inprocess"
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
CELERY_BROKER_URL = "memory://"
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
LOOM_TEST_REDIS_URL = os.environ.get("LOOM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
LOGGING = {"version": 1, "disable_existing_loggers": False}

if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    # A file, not SQLite's default in-memory shared-cache test database: the embedded runtime's
    # threads write while the API serves, and only a file in WAL mode gives them what the demo
    # has (readers beside the writer, writers queued by the busy timeout); shared-cache tables
    # fail at once with "database table is locked".
    # In var/ (per checkout), so --reuse-db reuses it; pytest-django suffixes it per xdist worker.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-loom.sqlite3")}  # noqa: F405

if "pool" in DATABASES["default"].get("OPTIONS", {}):  # noqa: F405
    # pytest-asyncio gives every test an event loop of its own, and the threads of its default
    # executor end with it still holding their thread's pooled connection (Django returns one
    # only when its thread closes it). The socket goes with the thread, but the pool keeps
    # counting the connection as lent, so across a thousand tests a cap sized for one long-lived
    # process runs out. Processes outside tests keep their threads for their lifetime.
    DATABASES["default"]["OPTIONS"]["pool"]["max_size"] = 1024  # noqa: F405
