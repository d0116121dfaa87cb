"""Page views: the single-page app's shell (served from frontend/dist) and login/logout."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.views.decorators.csrf import ensure_csrf_cookie

from apps.dashboard.roles import user_can_view

LOGIN_URL = "/login/"


def frontend_index_path() -> Path:
    return Path(settings.BASE_DIR) / "frontend" / "dist" / "index.html"


@lru_cache(maxsize=1)
def _cached_index(path: Path, mtime: float) -> str:
    return path.read_text(encoding="utf-8")


def frontend_index() -> str | None:
    """The built index.html (re-read when a rebuild changes it), or None before a build."""
    path = frontend_index_path()
    try:
        return _cached_index(path, path.stat().st_mtime)
    except FileNotFoundError:
        return None


@ensure_csrf_cookie
@login_required(login_url=LOGIN_URL)
def spa_shell(request: HttpRequest, **route: object) -> HttpResponse:
    """Every dashboard URL serves the same shell; the TypeScript router picks the page."""
    if not user_can_view(request.user):
        body = render_to_string("dashboard/no_role.html", {"user": request.user}, request)
        return HttpResponse(body, status=403)
    index = frontend_index()
    if index is None:
        body = render_to_string(
            "dashboard/not_built.html", {"path": frontend_index_path()}, request
        )
        return HttpResponse(body, status=503)
    response = HttpResponse(index)
    response["Cache-Control"] = "no-cache"
    return response


class LoginView(auth_views.LoginView):
    template_name = "dashboard/login.html"
    redirect_authenticated_user = True
    next_page = "/"


class LogoutView(auth_views.LogoutView):
    next_page = LOGIN_URL
