"""ASGI entry point: HTTP goes to Django (through the one-hop thread bridge), websockets to the
Channels URL router."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings.dev")

# Django must be set up before anything imports models (consumers do).
django.setup(set_prefix=False)  # each request sets its script prefix (the WSGI handler does)

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from controlplane.http_bridge import django_http_application  # noqa: E402
from controlplane.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_http_application(),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
