"""The settings' logging: each record once, in one format."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils.log import configure_logging

from controlplane.settings import base


@pytest.fixture
def base_logging() -> Iterator[io.StringIO]:
    """The base settings' logging as a served process configures it (Django's defaults first),
    with DEBUG on as in the demo, every console handler writing to one buffer; the test
    settings' logging after."""
    stream = io.StringIO()
    root = logging.getLogger()
    root_level, root_handlers = root.level, list(root.handlers)  # pytest's capture among them
    with override_settings(DEBUG=True):
        configure_logging(settings.LOGGING_CONFIG, base.LOGGING)
        for name in ("", "django", "django.request", "httpx"):
            for handler in logging.getLogger(name).handlers:
                if isinstance(handler, logging.StreamHandler):
                    handler.setStream(stream)
        try:
            yield stream
        finally:
            configure_logging(settings.LOGGING_CONFIG, settings.LOGGING)
            root.setLevel(root_level)
            root.handlers[:] = root_handlers


def test_a_django_request_warning_is_written_once(base_logging: io.StringIO) -> None:
    logging.getLogger("django.request").warning("Bad Request: %s", "/api/v1/actions/")
    written = base_logging.getvalue()
    assert written.count("Bad Request: /api/v1/actions/") == 1
    assert "WARNING django.request: Bad Request" in written


def test_httpx_request_lines_are_not_logged(base_logging: io.StringIO) -> None:
    logging.getLogger("httpx").info('HTTP Request: POST http://x/v1 "HTTP/1.1 200 OK"')
    logging.getLogger("httpx").warning("retrying")
    assert "HTTP Request" not in base_logging.getvalue()
    assert "retrying" in base_logging.getvalue()
