"""The router's HTTP surface (DESIGN.md "router"): OpenAI-compatible, trajectory-aware.

OpenAI: ``POST /v1/chat/completions``, ``POST /v1/completions`` (SSE passed through as it
arrives, or one JSON answer), ``GET /v1/models``. Every generation request names its trajectory
(``X-Loom-Trajectory`` header, or the body field ``loom_trajectory``, removed before forwarding)
and authenticates with its job's API key (``Authorization: Bearer``). Optional ``X-Loom-Prompt``
/ ``X-Loom-Group`` (or ``loom_prompt`` / ``loom_group``) name the prompt and sample group the
length predictor keys its history on.

Loom: ``GET /v1/loom/trajectories/{id}``, ``POST /v1/loom/trajectories/{id}/abort`` (every
request of the trajectory, on its worker), ``POST /v1/loom/trajectories/{id}/end``,
``POST /v1/loom/requests/{rid}/abort``, ``POST /v1/loom/groups`` (DARTS group rollouts,
:mod:`.groups`), ``GET /v1/loom/workers``, and with the admin token
``POST /v1/loom/workers/{name}/drain`` / ``.../undrain``; ``GET /health``.

Errors carry both shapes in one body: the REST API's ``{"errors": [{"field", "reason"}]}`` and
OpenAI's ``{"error": {"message", "type", "param", "code"}}``, so the ``openai`` client and Loom's
own clients both read them. A worker lost before the answer started is retried once on another
worker; lost mid-stream, the stream ends with an error event (``code: worker_lost``,
``retryable: true``) — never a hang. A client that leaves aborts its request on the worker.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from redis.exceptions import RedisError

from workers.engine.asgi import (
    BodyTooLarge,
    Receive,
    Scope,
    Send,
    header,
    read_body,
    send_json,
)
from workers.engine.openai_api import BadRequest, parse_chat, parse_completion
from workers.router.forward import Forwarder, RouterError
from workers.router.groups import GroupService
from workers.router.policies import RoutingPolicy
from workers.router.pool import WorkerPool
from workers.router.registry import ControlPlaneRegistry
from workers.router.trajectories import ABORTED, FAILED, FINISHED, TrajectoryTable

_PARSERS = {"/v1/chat/completions": parse_chat, "/v1/completions": parse_completion}
OPEN_JOB = "open"
log = logging.getLogger("loom.router")


def error_body(
    field: str, reason: str, *, code: str, retryable: bool = False, kind: str | None = None
) -> dict[str, Any]:
    """Both error shapes (module docstring)."""
    error: dict[str, Any] = {
        "message": reason,
        "type": kind or ("server_error" if retryable else "invalid_request_error"),
        "param": field,
        "code": code,
    }
    if retryable:
        error["retryable"] = True
    return {"errors": [{"field": field, "reason": reason}], "error": error}


class RouterApp:
    """ASGI app. ``registry=None`` runs open (no keys, any trajectory id): benches and local
    experiments only; otherwise every request is checked against the control plane's keys and
    trajectories (Redis in production, the database in the embedded mode)."""

    def __init__(
        self,
        pool: WorkerPool,
        policy: RoutingPolicy,
        *,
        registry: ControlPlaneRegistry | None,
        table: TrajectoryTable | None = None,
        models: tuple[str, ...] = (),
        admin_token: str | None = None,
        publish: Any = None,
        name: str = "router",
    ) -> None:
        self.name = name
        self.pool = pool
        self.policy = policy
        self.registry = registry
        self.table = table or TrajectoryTable()
        self.models = models
        self.admin_token = admin_token
        self.created = int(time.time())
        self.forwarder = Forwarder(pool, policy, self.table, publish=publish)
        self.groups = GroupService(self.forwarder, pool, models)
        if publish is not None:
            pool.on_metrics = self._publish_workers

    def _publish_workers(self, workers: list[Any]) -> None:
        """Each worker's health and the engine's own load (running, queued, KV use) on the
        state stream, after every metrics poll: the control plane keeps the newest per worker."""
        self.forwarder.publish(
            {
                "event": "workers",
                "router": self.name,
                "policy": self.forwarder.policy.name,
                "workers": [worker.describe() for worker in workers],
                "at": time.time(),
            }
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            if method == "POST" and path in _PARSERS:
                await self._generate(scope, path, receive, send)
            elif method == "GET" and path == "/v1/models":
                await self._authenticate(scope)
                await send_json(send, 200, self._models())
            elif method == "GET" and path == "/health":
                healthy = bool(self.pool.available())
                await send_json(send, 200 if healthy else 503, {"healthy": healthy})
            elif path.startswith("/v1/loom/"):
                await self._loom(scope, method, path[len("/v1/loom/") :], receive, send)
            else:
                raise RouterError(404, "path", f"no route {method} {path}", "not_found")
        except RouterError as exc:
            headers = [(b"retry-after", b"1")] if exc.retryable else None
            body = error_body(exc.field, exc.reason, code=exc.code, retryable=exc.retryable)
            await send_json(send, exc.status, body, headers)
        except (RedisError, OSError) as exc:
            log.warning("control plane registry unreachable: %s", exc)
            body = error_body(
                "server", "the control plane's registry (Redis) is unreachable; retry",
                code="registry_unavailable", retryable=True,
            )  # fmt: skip
            await send_json(send, 503, body, [(b"retry-after", b"1")])

    def _models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": m, "object": "model", "created": self.created, "owned_by": "loom"}
                for m in self.models
            ],
        }

    # ------------------------------------------------------------------ checks
    async def _authenticate(self, scope: Scope) -> str:
        """The job the bearer key acts for (REST semantics: 401 naming ``Authorization``)."""
        if self.registry is None:
            return OPEN_JOB
        value = header(scope, b"authorization")
        if not value:
            raise RouterError(
                401, "Authorization", "an API key is required (Bearer)", "unauthorized"
            )
        scheme, _, token = value.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            raise RouterError(
                401, "Authorization", "malformed Authorization header; expected 'Bearer <key>'",
                "unauthorized",
            )  # fmt: skip
        job = await self.registry.job_of_key(token)
        if job is None:
            raise RouterError(401, "Authorization", "unknown or revoked API key", "unauthorized")
        return job

    async def _trajectory_job(self, trajectory_id: str, job: str, field: str) -> None:
        """Unknown and foreign trajectories look alike (the REST API's 404, nothing leaked)."""
        if self.registry is None:
            return
        owner = await self.registry.job_of_trajectory(trajectory_id)
        if owner is None or owner != job:
            raise RouterError(
                404, field, f"trajectory {trajectory_id!r} not found (or not visible to this key)",
                "trajectory_not_found",
            )  # fmt: skip

    async def _json(self, receive: Receive) -> Any:
        try:
            raw = await read_body(receive)
        except BodyTooLarge as exc:
            raise RouterError(413, "body", str(exc), "body_too_large") from None
        if raw is None:
            return None
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise RouterError(400, "body", f"not valid JSON: {exc}", "invalid_json") from None

    # ------------------------------------------------------------------ generation
    async def _generate(self, scope: Scope, path: str, receive: Receive, send: Send) -> None:
        body = await self._json(receive)
        if body is None:
            return  # the client left before its request arrived
        try:
            spec = _PARSERS[path](body)
        except BadRequest as exc:
            raise RouterError(exc.status, exc.param, exc.message, exc.code) from None
        if spec.model is None:
            raise RouterError(400, "model", "required: the model to generate with", "missing")
        if spec.model not in self.models:
            raise RouterError(
                404, "model", f"the model {spec.model!r} does not exist; served: "
                f"{', '.join(self.models)}", "model_not_found",
            )  # fmt: skip
        job = await self._authenticate(scope)
        trajectory_id, field = header(scope, b"x-loom-trajectory"), "X-Loom-Trajectory"
        if "loom_trajectory" in body:
            trajectory_id, field = body.pop("loom_trajectory"), "loom_trajectory"
        if not isinstance(trajectory_id, str) or not trajectory_id:
            raise RouterError(
                400, field, "required: the trajectory this request belongs to (the "
                "X-Loom-Trajectory header or the loom_trajectory body field)", "missing",
            )  # fmt: skip
        await self._trajectory_job(trajectory_id, job, field)
        prompt_id = body.pop("loom_prompt", None) or header(scope, b"x-loom-prompt")
        group_id = body.pop("loom_group", None) or header(scope, b"x-loom-group")
        state = self.table.open(
            trajectory_id,
            job_id=job,
            prompt_id=str(prompt_id) if prompt_id else None,
            group_id=str(group_id) if group_id else None,
            prompt_tokens=spec.prompt_tokens,
        )
        raw = scope.get("extensions", {}).get("loom.raw_stream")  # the router's own server
        await self.forwarder.forward(state, path, body, spec, receive, send, raw)

    # ------------------------------------------------------------------ loom endpoints
    async def _loom(
        self, scope: Scope, method: str, rest: str, receive: Receive, send: Send
    ) -> None:
        parts = rest.split("/")
        if parts[0] == "workers":
            await self._workers(scope, method, parts, send)
            return
        job = await self._authenticate(scope)
        if parts == ["groups"] and method == "POST":  # DARTS group rollouts (groups.py)
            body = await self._json(receive)
            if body is not None:
                await self.groups.serve(job, body, receive, send)
            return
        if parts[0] == "trajectories" and len(parts) in (2, 3):
            trajectory_id = parts[1]
            await self._trajectory_job(trajectory_id, job, "trajectory_id")
            state = self.table.get(trajectory_id)
            action = parts[2] if len(parts) == 3 else None
            if method == "GET" and action is None:
                if state is None:
                    raise RouterError(
                        404, "trajectory_id", "the router holds no state for this trajectory "
                        "(never routed, or ended)", "trajectory_not_active",
                    )  # fmt: skip
                await send_json(send, 200, state.snapshot("read"))
                return
            if method == "POST" and action in ("abort", "end"):
                body = await self._json(receive)
                status: str = ABORTED
                if action == "end":
                    given = body.get("status", FINISHED) if isinstance(body, dict) else None
                    if given not in (FINISHED, FAILED):
                        raise RouterError(
                            400, "status", "must be 'finished' or 'failed'", "invalid"
                        )
                    status = str(given)
                aborted = self.forwarder.end_trajectory(trajectory_id, status)
                await send_json(send, 200, {"trajectory": trajectory_id, "status": status,
                                            "aborted_requests": aborted})  # fmt: skip
                return
        if parts[0] == "requests" and len(parts) == 3 and parts[2] == "abort" and method == "POST":
            flight = self.pool.requests.get(parts[1])
            if flight is None or flight.job_id != job:
                raise RouterError(
                    404, "rid", f"request {parts[1]!r} not in flight (or not visible to this key)",
                    "request_not_found",
                )  # fmt: skip
            self.pool.abort(flight, "aborted by the client", cut=False)
            await send_json(send, 200, {"rid": parts[1], "aborted": True})
            return
        raise RouterError(404, "path", f"no route {method} /v1/loom/{rest}", "not_found")

    async def _workers(self, scope: Scope, method: str, parts: list[str], send: Send) -> None:
        if method == "GET" and len(parts) == 1:
            await send_json(send, 200, {"workers": [w.describe() for w in self.pool.workers]})
            return
        if method == "POST" and len(parts) == 3 and parts[2] in ("drain", "undrain"):
            token = header(scope, b"authorization") or ""
            if not self.admin_token or token != f"Bearer {self.admin_token}":
                raise RouterError(
                    403, "Authorization", "draining a worker needs the router's admin token",
                    "forbidden",
                )  # fmt: skip
            worker = self.pool.by_name.get(parts[1])
            if worker is None:
                raise RouterError(404, "name", f"no worker {parts[1]!r}", "worker_not_found")
            worker.draining = parts[2] == "drain"
            await send_json(send, 200, worker.describe())
            return
        raise RouterError(404, "path", f"no route {method} /v1/loom/{'/'.join(parts)}", "not_found")
