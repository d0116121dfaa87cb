"""Settings shared by every Loom process; all deployment choices come from the environment.

DATABASE_URL (unset → SQLite under var/), REDIS_URL (unset → embedded mode: in-memory channel
layer, eager Celery, in-process transport), LOOM_SECRET_KEY, LOOM_ALLOWED_HOSTS, LOOM_LOG_LEVEL.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from controlplane.env import (
    database_from_url,
    env_bool,
    env_int,
    env_list,
    env_log_level,
    env_str,
    redis_url,
    secret_key,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(env_str("LOOM_VAR_DIR", str(BASE_DIR / "var")))

SECRET_KEY = secret_key("LOOM_SECRET_KEY", keep_in=VAR_DIR / "secret_key")
DEBUG = False
ALLOWED_HOSTS = env_list("LOOM_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
LOG_LEVEL = env_log_level("LOOM_LOG_LEVEL", "INFO")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "apps.jobs",
    "apps.resources",
    "apps.trajectories",
    "apps.actions",
    "apps.policies",
    "apps.buffers",
    "apps.dashboard",
    "apps.metrics",
    "apps.embedded",  # the top layer: `manage.py demo` (pyproject.toml [tool.importlinter])
]

MIDDLEWARE = [
    "controlplane.api.middleware.ApiErrorsMiddleware",  # outermost: sees every error response
    "apps.metrics.middleware.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"
ASGI_APPLICATION = "controlplane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": database_from_url(
        "DATABASE_URL", env_str("DATABASE_URL", "") or None, sqlite_path=VAR_DIR / "loom.sqlite3"
    )
}
if (
    DATABASES["default"]["ENGINE"].endswith("sqlite3")
    and DATABASES["default"]["NAME"] != ":memory:"
):
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# The dashboard's built frontend (make demo / make test run `npm ci && npm run build` first).
STATICFILES_DIRS = [BASE_DIR / "frontend" / "dist"]
LOGIN_URL = "/login/"
STATIC_ROOT: Path | None = (
    None  # prod sets it (collectstatic); dev serves from the apps via WhiteNoise
)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Serve app static files (admin, Swagger UI from the sidecar) without a collectstatic step.
WHITENOISE_USE_FINDERS = True

# Request bodies (controlplane/api/limits.py): a 10 000-action batch with commands is a few MB of
# JSON; no real payload nests more than a few levels, and Python's parser and renderer recurse.
LOOM_MAX_BODY_BYTES = env_int("LOOM_MAX_BODY_BYTES", 32 * 1024 * 1024, minimum=1024)
LOOM_MAX_JSON_DEPTH = env_int("LOOM_MAX_JSON_DEPTH", 64, minimum=2)
DATA_UPLOAD_MAX_MEMORY_SIZE = LOOM_MAX_BODY_BYTES

# --- Redis or embedded -----------------------------------------------------------------------
REDIS_URL = redis_url("REDIS_URL")
LOOM_EMBEDDED = REDIS_URL is None
# workers/transport reads this: "inprocess" (embedded) or "redis".
LOOM_TRANSPORT = "inprocess" if LOOM_EMBEDDED else "redis"

CHANNEL_LAYERS: dict[str, dict[str, Any]]
if REDIS_URL is None:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
    CELERY_TASK_EAGER_PROPAGATES = True
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
CELERY_RESULT_BACKEND = None
CELERY_BEAT_SCHEDULE = {
    "metrics-rollup": {"task": "metrics.rollup", "schedule": 10.0},
    "metrics-prune": {"task": "metrics.prune", "schedule": 3600.0},
    "trajectories-router-state": {"task": "trajectories.router_state", "schedule": 1.0},
    "trajectories-router-sync": {"task": "trajectories.router_sync", "schedule": 300.0},
    "trajectories-train-length-predictor": {
        "task": "trajectories.train_length_predictor",
        "schedule": 600.0,
    },
    "buffers-snapshot": {"task": "buffers.snapshot", "schedule": 5.0},
    "buffers-prune": {"task": "buffers.prune", "schedule": 3600.0},
    "buffers-sync": {"task": "buffers.sync", "schedule": 300.0},
}
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = TIME_ZONE

# --- Local action sandboxes (workers/agents/cpu/sandbox.py) -------------------------------------
# Working directories of the embedded runtime's local agent: outside the repository, so that no
# project configuration of Loom's (pyproject.toml, conftest.py) leaks into an action.
LOOM_SANDBOX_ROOT = Path(
    env_str("LOOM_SANDBOX_ROOT", str(Path(tempfile.gettempdir()) / "loom-sandboxes"))
)
LOOM_SANDBOX_USER = env_str("LOOM_SANDBOX_USER", "loom-sandbox")  # an account or "uid:gid"
# Tool runtimes bound read-only into every sandbox; unset: the running interpreter's virtualenv
# and base installation (the demo's reward suites run its pytest); "none": nothing.
LOOM_SANDBOX_RO_BINDS: list[str] | None = (
    None
    if env_str("LOOM_SANDBOX_RO_BINDS", "") == ""
    else [b for b in env_list("LOOM_SANDBOX_RO_BINDS", []) if b != "none"]
)
# Run actions without a sandbox where none works: any job key then acts with the agent's rights.
LOOM_INSECURE_UNSANDBOXED_ACTIONS = env_bool("LOOM_INSECURE_UNSANDBOXED_ACTIONS", False)

# --- API ---------------------------------------------------------------------------------------
LOOM_MAX_BATCH = env_int("LOOM_MAX_BATCH", 10_000, minimum=1)
LOOM_MAX_RESULT_WAIT_S = 60
# Threads serving HTTP under the ASGI server (controlplane/http_bridge.py): requests at once,
# long-polls included (they hold no database connection while they wait).
LOOM_WEB_THREADS = env_int("LOOM_WEB_THREADS", 64, minimum=1)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.jobs.authentication.BearerKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["controlplane.api.parsers.StrictJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "controlplane.api.schema.LoomAutoSchema",
    "EXCEPTION_HANDLER": "controlplane.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS: dict[str, Any] = {
    "TITLE": "Loom control plane API",
    "DESCRIPTION": (
        "Jobs, actions, trajectories, resources and policies of Loom, the control plane for "
        "agentic RL rollouts. Authenticate with `Authorization: Bearer <key>`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "controlplane.api.schema.add_error_responses",
        "controlplane.api.schema.add_action_links",
    ],
    "ENUM_NAME_OVERRIDES": {
        "ActionStatusEnum": "apps.actions.models.ActionStatus",
        "TrajectoryStatusEnum": "apps.trajectories.models.TrajectoryStatus",
        "JobStatusEnum": "apps.jobs.models.JobStatus",
        "NodeStatusEnum": "apps.resources.models.NodeStatus",
        "PoolKindEnum": "apps.resources.models.PoolKind",
        "PolicyKindEnum": "apps.policies.models.PolicyKind",
        "TriggerKindEnum": "apps.buffers.models.TriggerKind",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # Django's own console handler (DEBUG only) printed every django.* record a second
        # time beside the root's; the root handler alone now writes them.
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        # One INFO line per HTTP request an httpx client makes (the demo's LLM turns).
        "httpx": {"level": "WARNING"},
    },
}
