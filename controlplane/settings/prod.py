"""Production: LOOM_SECRET_KEY is required (never generated), secure cookies."""

from controlplane.env import env_bool, secret_key
from controlplane.settings.base import *  # noqa: F403

SECRET_KEY = secret_key("LOOM_SECRET_KEY", keep_in=None)
DEBUG = False
SESSION_COOKIE_SECURE = env_bool("LOOM_SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
WHITENOISE_USE_FINDERS = False
STATIC_ROOT = BASE_DIR / "staticfiles"  # noqa: F405
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
