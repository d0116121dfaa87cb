from pathlib import Path
from typing import Any

import pytest


def test_pages_redirect_to_login_when_anonymous(client: Any, db: Any) -> None:
    for url in ("/", "/pools/cpu", "/jobs/3", "/actions/4", "/policies", "/launch"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/?next=")


def test_login_page_logs_in_and_logout_logs_out(client: Any, operator_user: Any) -> None:
    page = client.get("/login/")
    assert page.status_code == 200 and b'name="password"' in page.content
    wrong = client.post("/login/", {"username": "watcher", "password": "nope"})
    assert b"Wrong username or password" in wrong.content
    right = client.post("/login/", {"username": "watcher", "password": "pw", "next": "/jobs"})
    assert right.status_code == 302 and right["Location"] == "/jobs"
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_shell_serves_the_built_index_with_a_csrf_cookie(
    client: Any, operator_user: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from apps.dashboard import views

    index = tmp_path / "index.html"
    index.write_text("<!doctype html><title>Loom</title>")
    monkeypatch.setattr(views, "frontend_index_path", lambda: index)
    client.force_login(operator_user)
    response = client.get("/jobs/12?status=queued")
    assert response.status_code == 200 and response.content == index.read_bytes()
    assert "csrftoken" in response.cookies


def test_shell_explains_a_missing_build_and_a_missing_role(
    client: Any,
    operator_user: Any,
    roleless_user: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from apps.dashboard import views

    monkeypatch.setattr(views, "frontend_index_path", lambda: tmp_path / "missing.html")
    client.force_login(operator_user)
    missing = client.get("/")
    assert missing.status_code == 503 and b"npm ci" in missing.content
    client.force_login(roleless_user)
    assert client.get("/").status_code == 403
