"""How the web tier reaches the buffer service (artos §5): the data plane's own ZeroMQ client
(``workers.buffers.service.BufferClient``), one per thread, at the address in
``LOOM_BUFFER_SERVICE`` (``tcp://host:port`` or ``ipc://path``).

The experience data never touches the database: a push, gather, sample or stats request is
checked against the definition here and forwarded to the service, which serves every job's
buffers under ``Buffer.service_name``. A service that is not configured, not listening or not
answering within ``LOOM_BUFFER_SERVICE_TIMEOUT_MS`` is ``BufferServiceUnavailable`` (the API's
503, which the SDK retries); a refusal by the service is ``BufferServiceRefused`` naming the
field it concerns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import zmq
from django.core.exceptions import ImproperlyConfigured

from controlplane.env import env_int, env_str
from workers.buffers.service import BufferClient, BufferServiceError

SERVICE_ENV = "LOOM_BUFFER_SERVICE"
TIMEOUT_ENV = "LOOM_BUFFER_SERVICE_TIMEOUT_MS"
DEFAULT_TIMEOUT_MS = 5000
SCHEMES = ("tcp://", "ipc://")

T = TypeVar("T")
_local = threading.local()


class BufferServiceUnavailable(Exception):
    """The buffer service cannot be reached now; the request may succeed later."""


class BufferServiceRefused(Exception):
    """The buffer service refused the request: ``status`` (HTTP), the ``field`` and why."""

    def __init__(self, *, status: int, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.status, self.field, self.reason = status, field, reason


def configured_address() -> str | None:
    """``LOOM_BUFFER_SERVICE``, or None when unset (the embedded mode runs no buffer service);
    a malformed value is ``ImproperlyConfigured`` naming the variable. ``apps.buffers.apps``
    checks it at start-up, so a deployment with a typo in it does not start."""
    address = env_str(SERVICE_ENV, "")
    if not address:
        return None
    if not address.startswith(SCHEMES) or len(address) <= len("tcp://"):
        raise ImproperlyConfigured(
            f"{SERVICE_ENV}: expected tcp://host:port or ipc://path, got {address!r}"
        )
    env_int(TIMEOUT_ENV, DEFAULT_TIMEOUT_MS, minimum=1)
    return address


def service_address() -> str:
    """The configured address; unset, the service is unavailable here (a 503 naming why)."""
    address = configured_address()
    if address is None:
        raise BufferServiceUnavailable(
            f"{SERVICE_ENV} is not set: this server does not know where the buffer service is"
        )
    return address


def _client(address: str, timeout_ms: int) -> BufferClient:
    clients: dict[tuple[str, int], BufferClient] = _local.__dict__.setdefault("clients", {})
    client = clients.get((address, timeout_ms))
    if client is None:
        client = clients[(address, timeout_ms)] = BufferClient(address, timeout_ms / 1000)
    return client


def _forget(address: str, timeout_ms: int) -> None:
    client = _local.__dict__.get("clients", {}).pop((address, timeout_ms), None)
    if client is not None:
        client.close()


def _field_and_reason(message: str, default: str) -> tuple[str, str]:
    message = message.strip("'\"")  # a KeyError's text arrives quoted
    field, sep, reason = message.partition(": ")
    return (field, reason) if sep and " " not in field else (default, message)


def refusal(error: BufferServiceError) -> BufferServiceRefused:
    """The service's error class → the status and field the API answers with."""
    field, reason = _field_and_reason(str(error), "buffer")
    if error.kind == "KeyError" and field == "buffer":
        reason = f"not served by the buffer service ({reason}); start it with this definition"
        return BufferServiceRefused(status=409, field="buffer", reason=reason)
    if error.kind == "BufferFullError":
        return BufferServiceRefused(status=409, field="records", reason=str(error))
    if error.kind == "DataLostError":
        return BufferServiceRefused(status=409, field="slices", reason=str(error))
    if error.kind == "SamplerError" and field == "size":
        return BufferServiceRefused(
            status=409, field="buffer", reason=f"nothing to sample: {reason}"
        )
    if error.kind == "SchemaError" and field == "sampler":
        return BufferServiceRefused(status=409, field="sampler", reason=reason)
    if error.kind == "SchemaError":
        return BufferServiceRefused(status=400, field=f"records.{field}", reason=reason)
    if error.kind in ("SamplerError", "KeyError"):
        return BufferServiceRefused(status=400, field=field, reason=reason)
    return BufferServiceRefused(
        status=502, field="buffer_service", reason=f"the buffer service failed: {error}"
    )


def call(operation: Callable[[BufferClient], T]) -> T:
    """Run one client operation against the configured service, translating its failures."""
    address = service_address()
    timeout_ms = env_int(TIMEOUT_ENV, DEFAULT_TIMEOUT_MS, minimum=1)
    try:
        return operation(_client(address, timeout_ms))
    except TimeoutError as error:
        raise BufferServiceUnavailable(
            f"the buffer service at {address} did not answer within {timeout_ms} ms"
        ) from error
    except zmq.ZMQError as error:
        _forget(address, timeout_ms)
        raise BufferServiceUnavailable(
            f"the buffer service at {address} cannot be reached: {error}"
        ) from error
    except BufferServiceError as error:
        raise refusal(error) from error
