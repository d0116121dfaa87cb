"""WSGI entry point (management tools, tests); the served app is ASGI (controlplane.asgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings.dev")

application = get_wsgi_application()
