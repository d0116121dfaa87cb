"""Configuration from the environment: malformed values stop start-up naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from controlplane import env

ROOT = Path(__file__).resolve().parents[3]


def test_database_url_defaults_to_sqlite(tmp_path):
    config = env.database_from_url("DATABASE_URL", None, sqlite_path=tmp_path / "x.db")
    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["NAME"] == str(tmp_path / "x.db")
    # the embedded mode writes from the scheduler while the API serves: WAL + a busy timeout
    assert "journal_mode=WAL" in config["OPTIONS"]["init_command"]
    assert config["OPTIONS"]["timeout"] > 0


def test_database_url_postgres():
    config = env.database_from_url(
        "DATABASE_URL",
        "postgres://loom:s%40cret@db.internal:6543/loom?sslmode=require",
        sqlite_path=Path("unused"),
    )
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["USER"], config["PASSWORD"], config["HOST"], config["PORT"]) == (
        "loom",
        "s@cret",
        "db.internal",
        "6543",
    )
    assert config["NAME"] == "loom" and config["OPTIONS"]["sslmode"] == "require"
    # ASGI runs each request on a fresh thread: a pool, not per-thread persistent connections
    assert config["OPTIONS"]["pool"]["max_size"] >= 1 and config["CONN_MAX_AGE"] == 0


def test_database_pool_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("LOOM_DB_POOL", "false")
    config = env.database_from_url(
        "DATABASE_URL", "postgres://loom@db:5432/loom", sqlite_path=Path("unused")
    )
    assert "pool" not in config["OPTIONS"] and config["CONN_MAX_AGE"] == 60
    monkeypatch.setenv("LOOM_DB_POOL", "true")
    monkeypatch.setenv("LOOM_DB_POOL_SIZE", "lots")
    with pytest.raises(ImproperlyConfigured, match="LOOM_DB_POOL_SIZE"):
        env.database_from_url("DATABASE_URL", "postgres://loom@db/loom", sqlite_path=Path("x"))


@pytest.mark.parametrize(
    "url",
    [
        "mysql://x/y",
        "postgres://host:5432/",
        "postgres://host:notaport/db",
        "sqlite://",
        "nonsense",
    ],
)
def test_malformed_database_url_names_the_variable(url):
    with pytest.raises(ImproperlyConfigured, match=r"^DATABASE_URL: "):
        env.database_from_url("DATABASE_URL", url, sqlite_path=Path("unused"))


@pytest.mark.parametrize(
    ("name", "value", "reader"),
    [
        ("REDIS_URL", "http://localhost", lambda: env.redis_url("REDIS_URL")),
        ("REDIS_URL", "redis://host:port", lambda: env.redis_url("REDIS_URL")),
        ("LOOM_LOG_LEVEL", "LOUD", lambda: env.env_log_level("LOOM_LOG_LEVEL", "INFO")),
        ("LOOM_ALLOWED_HOSTS", "a,,b", lambda: env.env_list("LOOM_ALLOWED_HOSTS", [])),
        ("LOOM_MAX_BATCH", "many", lambda: env.env_int("LOOM_MAX_BATCH", 1)),
        ("LOOM_MAX_BATCH", "0", lambda: env.env_int("LOOM_MAX_BATCH", 1, minimum=1)),
        ("LOOM_SECURE_COOKIES", "maybe", lambda: env.env_bool("LOOM_SECURE_COOKIES", True)),
        ("LOOM_SECRET_KEY", "short", lambda: env.secret_key("LOOM_SECRET_KEY", keep_in=None)),
    ],
)
def test_malformed_values_name_the_variable(monkeypatch, name, value, reader):
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=f"^{name}: "):
        reader()


def test_typed_values(monkeypatch):
    monkeypatch.setenv("LOOM_ALLOWED_HOSTS", "loom.example.com, 10.0.0.1")
    assert env.env_list("LOOM_ALLOWED_HOSTS", []) == ["loom.example.com", "10.0.0.1"]
    monkeypatch.setenv("LOOM_LOG_LEVEL", "debug")
    assert env.env_log_level("LOOM_LOG_LEVEL", "INFO") == "DEBUG"
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    assert env.redis_url("REDIS_URL") == "redis://127.0.0.1:6379/0"
    monkeypatch.setenv("REDIS_URL", "")
    assert env.redis_url("REDIS_URL") is None


def test_dev_secret_key_is_generated_once(tmp_path, monkeypatch):
    monkeypatch.delenv("LOOM_SECRET_KEY", raising=False)
    first = env.secret_key("LOOM_SECRET_KEY", keep_in=tmp_path / "secret_key")
    assert len(first) >= 50
    assert env.secret_key("LOOM_SECRET_KEY", keep_in=tmp_path / "secret_key") == first
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600


def _settings_subprocess(module: str, **environ: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LOOM_", "DATABASE_URL"))}
    clean.pop("REDIS_URL", None)
    code = (
        "import django, os; django.setup(); from django.conf import settings; "
        "print(settings.LOOM_EMBEDDED, settings.CELERY_TASK_ALWAYS_EAGER, "
        "settings.CHANNEL_LAYERS['default']['BACKEND'])"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": module, **environ},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.processes
def test_prod_requires_a_secret_key(tmp_path):
    result = _settings_subprocess("controlplane.settings.prod", LOOM_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "LOOM_SECRET_KEY: required in production" in result.stderr


@pytest.mark.processes
def test_redis_url_switches_off_the_embedded_mode(tmp_path):
    embedded = _settings_subprocess("controlplane.settings.dev", LOOM_VAR_DIR=str(tmp_path))
    assert embedded.stdout.split() == ["True", "True", "channels.layers.InMemoryChannelLayer"]
    with_redis = _settings_subprocess(
        "controlplane.settings.prod",
        LOOM_VAR_DIR=str(tmp_path),
        LOOM_SECRET_KEY="x" * 40,
        REDIS_URL="redis://127.0.0.1:6379/0",
    )
    assert with_redis.returncode == 0, with_redis.stderr
    assert with_redis.stdout.split() == ["False", "False", "channels_redis.core.RedisChannelLayer"]


@pytest.mark.processes
def test_malformed_env_stops_start_up(tmp_path):
    result = _settings_subprocess(
        "controlplane.settings.dev", LOOM_VAR_DIR=str(tmp_path), DATABASE_URL="mysql://x/y"
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured: DATABASE_URL: unsupported scheme" in result.stderr
