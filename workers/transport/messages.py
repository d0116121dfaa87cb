"""Versioned wire messages between the scheduler and the node agents.

Every message is a frozen dataclass with ``to_dict()``/``from_dict()``, both from one codec driven
by the fields' type hints (``codec.py``); the dict carries ``"v"`` (schema version) and ``"type"``
so one stream can hold several kinds of message (a node's dispatch stream holds Dispatch, Cancel
and TrajectoryEnd; a pool's event stream holds ActionResult, NodeRegister and Heartbeat).
``decode_message`` is the single entry point for reading. Unknown versions, unknown types,
missing required fields or values that do not convert raise ``MessageError``.

Resource semantics follow arl-tangram §5.2 (allocate-on-execution): a Dispatch names the exact
cores (NUMA-aware choice made by the scheduler) and the memory reserved for the trajectory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self, TypeAlias

from workers.transport.codec import SCHEMA_VERSION as SCHEMA_VERSION
from workers.transport.codec import MessageError, WireRecord, plan_for, wire

# ``noop`` does nothing and succeeds at once, on any agent: it measures the control plane's own
# overhead (submit → result minus execution) without a process spawn or an HTTP call.
# ``gpu`` runs a request on a GPU service (arl-tangram §5.3) on the chunk ``Dispatch.gpus``.
ActionKind = Literal["cpu", "api", "noop", "gpu"]
ResultStatus = Literal["succeeded", "failed", "timed_out", "cancelled"]

# Why an action ended the way it did (ActionResult.reason). ``None`` on a clean success.
REASON_EXIT_CODE_NONZERO = "exit_code_nonzero"
REASON_TIMEOUT = "timeout"
REASON_OUTPUT_TRUNCATED = "output_truncated"
REASON_AGENT_LOST = "agent_lost"
REASON_OOM = "oom"
REASON_INFRA_ERROR = "infra_error"
REASON_CANCELLED = "cancelled"
REASON_RATE_LIMITED = "rate_limited"
REASON_HTTP_ERROR = "http_error"
REASON_BAD_REQUEST = "bad_request"  # a gpu service refused the request's input (names the field)
REASON_LOAD_FAILED = "load_failed"  # a gpu service's weights did not load or restore
REASONS = frozenset(
    {
        REASON_BAD_REQUEST,
        REASON_LOAD_FAILED,
        REASON_EXIT_CODE_NONZERO,
        REASON_TIMEOUT,
        REASON_OUTPUT_TRUNCATED,
        REASON_AGENT_LOST,
        REASON_OOM,
        REASON_INFRA_ERROR,
        REASON_CANCELLED,
        REASON_RATE_LIMITED,
        REASON_HTTP_ERROR,
    }
)

DEFAULT_OUTPUT_CAP_BYTES = 64 * 1024


@dataclass(frozen=True)
class ApiRequestSpec(WireRecord):
    """The HTTP call an ``api`` action makes (arl-tangram §5.1: quota-limited external APIs)."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    json_body: Any = field(default=None, metadata=wire(key="json"))
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", self.method.upper())
        if not self.url.startswith(("http://", "https://")):
            raise MessageError(f"api url must be http(s), got {self.url!r}")
        if self.timeout_s <= 0:
            raise MessageError(f"api timeout_s must be > 0, got {self.timeout_s}")


@dataclass(frozen=True)
class Dispatch(WireRecord):
    """An allocation: run this action now on these cores (scheduler → agent).

    ``command`` may contain ``{dop}``, replaced by ``len(cores)`` at execution (elastic tools,
    arl-tangram §5.2 ``pytest -n ${parallel_num}``). ``memory_mb`` is the memory reserved for the
    trajectory (docker: the container's limit; local: the action's cgroup limit); 0 = no limit.
    ``retry_on_redelivery``: if this entry is delivered again after its agent died (reclaimed),
    re-run it (idempotent tool) instead of reporting ``agent_lost``.
    ``end_trajectory``: the trajectory has no further actions; drop its sandbox afterwards.
    ``network``: the tool may use the host's network; otherwise its sandbox has loopback only.
    ``gpu`` dispatches (arl-tangram §5.3): ``gpus`` is the allocated buddy chunk, ``service`` the
    GPU service to run on it, ``request`` its JSON input, ``priority`` forwarded to the service.
    """

    TYPE: ClassVar[str] = "dispatch"

    action_id: str
    attempt: int
    job_id: str
    kind: ActionKind
    trajectory_id: str | None = None
    command: str | None = None
    cores: tuple[int, ...] = ()
    memory_mb: int = 0
    # Required on the wire: a reader never guesses how long an action may run.
    timeout_s: float = field(default=60.0, metadata=wire(required=True))
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES
    env: dict[str, str] = field(default_factory=dict)
    api: ApiRequestSpec | None = None
    retry_on_redelivery: bool = False
    end_trajectory: bool = False
    dispatched_at: float = 0.0
    network: bool = False
    gpus: tuple[int, ...] = field(default=(), metadata=wire(omit_empty=True))
    service: str | None = field(default=None, metadata=wire(omit_empty=True))
    request: Any = field(default=None, metadata=wire(omit_empty=True))
    priority: int = field(default=0, metadata=wire(omit_empty=True))

    def __post_init__(self) -> None:
        if self.kind not in ("cpu", "api", "noop", "gpu"):
            raise MessageError(f"kind must be 'cpu', 'api', 'noop' or 'gpu', got {self.kind!r}")
        if self.kind == "gpu" and (not self.service or not self.gpus):
            raise MessageError("a gpu dispatch needs a service and its gpus")
        if self.kind == "cpu" and not self.command:
            raise MessageError("a cpu dispatch needs a command")
        if self.kind == "api" and self.api is None:
            raise MessageError("an api dispatch needs an api request spec")
        if self.timeout_s <= 0:
            raise MessageError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.output_cap_bytes < 0 or self.memory_mb < 0 or self.attempt < 1:
            raise MessageError("output_cap_bytes and memory_mb must be >= 0, attempt >= 1")

    @property
    def key(self) -> str:
        """``action_id:attempt`` — unique per execution attempt."""
        return f"{self.action_id}:{self.attempt}"

    @property
    def dop(self) -> int:
        """Degree of parallelism granted: the allocated cores, or GPUs (at least 1)."""
        return max(1, len(self.cores) or len(self.gpus))

    def rendered_command(self) -> str:
        """The command with ``{dop}`` filled in (only that placeholder; other braces untouched)."""
        if self.command is None:
            raise MessageError("dispatch has no command")
        return self.command.replace("{dop}", str(self.dop))


@dataclass(frozen=True)
class Cancel(WireRecord):
    """Stop an action (scheduler → agent). ``attempt=None`` cancels whichever attempt runs."""

    TYPE: ClassVar[str] = "cancel"

    action_id: str
    attempt: int | None = None
    reason: str = REASON_CANCELLED


@dataclass(frozen=True)
class TrajectoryEnd(WireRecord):
    """The trajectory is over (scheduler → agent): remove its working dir / container."""

    TYPE: ClassVar[str] = "trajectory_end"

    trajectory_id: str


@dataclass(frozen=True)
class ActionResult(WireRecord):
    """How one attempt of an action ended (agent → scheduler, on the pool's event stream).

    ``output`` is stdout+stderr (cpu) or the response body (api), decoded as UTF-8 with
    replacement, at most ``output_cap_bytes`` of the dispatch; ``output_truncated`` says more was
    produced. Times are wall-clock UNIX seconds taken on the agent. A ``gpu`` result also
    carries its chunk (``gpus``), where its time went on the agent (``timings``: queue, restore,
    execute seconds) and the service-cache events it caused (``cache_events``, arl-tangram §5.3);
    ``score``: the action's reward when it has one (a reward model scoring one sequence).
    """

    TYPE: ClassVar[str] = "action_result"

    action_id: str
    attempt: int
    node_id: str
    status: ResultStatus
    exit_code: int | None = None
    output: str = ""
    output_truncated: bool = False
    reason: str | None = None
    started_at: float = 0.0
    finished_at: float = 0.0
    http_status: int | None = None
    cores: tuple[int, ...] = ()
    trajectory_id: str | None = None
    gpus: tuple[int, ...] = field(default=(), metadata=wire(omit_empty=True))
    timings: dict[str, float] = field(default_factory=dict, metadata=wire(omit_empty=True))
    cache_events: tuple[dict[str, Any], ...] = field(default=(), metadata=wire(omit_empty=True))
    score: float | None = field(default=None, metadata=wire(omit_empty=True))

    def __post_init__(self) -> None:
        if self.status not in ("succeeded", "failed", "timed_out", "cancelled"):
            raise MessageError(f"invalid status {self.status!r}")
        if self.reason is not None and self.reason not in REASONS:
            raise MessageError(f"invalid reason {self.reason!r}")

    @property
    def key(self) -> str:
        return f"{self.action_id}:{self.attempt}"


@dataclass(frozen=True)
class NodeRegister(WireRecord):
    """A node announces its capacity (agent → scheduler), on start and after reconnecting.

    ``numa`` maps NUMA node id → its cores (arl-tangram §5.2: prefer cores of one NUMA node).
    ``concurrency`` is the api agent's in-flight limit (0 for cpu agents).
    A gpu agent (arl-tangram §5.3 "Pool") registers its ``gpus``, each one's ``gpu_memory_mb``,
    its ``nvlink_groups``, the ``services`` it hosts (name → ``weights_mb`` per instance and the
    chunk ``sizes`` it runs on) and its service ``cache`` (which service is resident where).
    """

    TYPE: ClassVar[str] = "node_register"

    node_id: str
    pool: str
    agent_id: str
    kind: ActionKind
    backend: str
    cores: tuple[int, ...] = ()
    numa: dict[int, tuple[int, ...]] = field(default_factory=dict)
    memory_mb: int = 0
    concurrency: int = 0
    dispatch_stream: str = ""
    started_at: float = 0.0
    gpus: tuple[int, ...] = field(default=(), metadata=wire(omit_empty=True))
    gpu_memory_mb: int = field(default=0, metadata=wire(omit_empty=True))
    nvlink_groups: tuple[tuple[int, ...], ...] = field(default=(), metadata=wire(omit_empty=True))
    services: dict[str, dict[str, Any]] = field(
        default_factory=dict, metadata=wire(omit_empty=True)
    )
    cache: tuple[dict[str, Any], ...] = field(default=(), metadata=wire(omit_empty=True))


@dataclass(frozen=True)
class Heartbeat(WireRecord):
    """Liveness plus what the agent is running now (``action_id:attempt`` keys); a gpu agent's
    also carries its service ``cache`` (which service is resident on which chunk): ``()`` says
    nothing is resident (every instance evicted), None that the agent has no cache (cpu, api)."""

    TYPE: ClassVar[str] = "heartbeat"

    node_id: str
    pool: str
    agent_id: str
    sent_at: float
    running: tuple[str, ...] = ()
    cache: tuple[dict[str, Any], ...] | None = field(default=None, metadata=wire(omit_none=True))


def _action_ids(raw: Any) -> tuple[int, ...]:
    if not isinstance(raw, list):
        raise MessageError("action_ids must be a list")
    try:
        return tuple(int(action_id) for action_id in raw)
    except (TypeError, ValueError) as exc:
        raise MessageError(f"action_ids must be integers: {exc}") from exc


def _records(raw: Any) -> tuple[dict[str, Any], ...]:
    records = raw or []
    if not isinstance(records, list) or not all(isinstance(record, dict) for record in records):
        raise MessageError("records must be a list of objects")
    return tuple(records)


@dataclass(frozen=True)
class _ActionIds(WireRecord):
    """A list of action ids from the web process to a pool's scheduler; the rows are the truth."""

    TYPE: ClassVar[str] = ""

    action_ids: tuple[int, ...] = field(metadata=wire(decode=_action_ids))


@dataclass(frozen=True)
class ActionsSubmitted(_ActionIds):
    """New actions are in the database: load and queue them.

    ``records`` (optional, small submissions only) are the new rows as the scheduler would load
    them (``ActionRecord`` fields), built by the web process from the row it just inserted: a
    live scheduler queues them without reading the table. The database stays the truth: the
    scheduling UPDATE only moves rows still queued, and a rebuilding scheduler ignores records
    and reads the rows.
    """

    TYPE: ClassVar[str] = "actions_submitted"

    records: tuple[dict[str, Any], ...] = field(
        default=(), metadata=wire(omit_empty=True, decode=_records)
    )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        message = super().from_dict(data)
        if any(record.get("action_id") not in message.action_ids for record in message.records):
            raise MessageError("every record must be one of action_ids")
        return message


@dataclass(frozen=True)
class ActionsCancelled(_ActionIds):
    """Users cancelled these actions: forget them, or stop their execution."""

    TYPE: ClassVar[str] = "actions_cancelled"


Message: TypeAlias = (
    Dispatch
    | Cancel
    | TrajectoryEnd
    | ActionResult
    | NodeRegister
    | Heartbeat
    | ActionsSubmitted
    | ActionsCancelled
)

_BY_TYPE: dict[str, Any] = {
    cls.TYPE: cls
    for cls in (
        Dispatch,
        Cancel,
        TrajectoryEnd,
        ActionResult,
        NodeRegister,
        Heartbeat,
        ActionsSubmitted,
        ActionsCancelled,
    )
}
# Every plan worked out once, here: a hint the codec cannot handle fails the import, not a reader.
for _message_class in _BY_TYPE.values():
    plan_for(_message_class)


def decode_message(data: dict[str, Any]) -> Message:
    """Build the message a dict describes; raises MessageError if it cannot."""
    if not isinstance(data, dict):
        raise MessageError(f"a message is a JSON object, got {type(data).__name__}")
    cls = _BY_TYPE.get(str(data.get("type")))
    if cls is None:
        raise MessageError(f"unknown message type {data.get('type')!r}")
    message: Message = cls.from_dict(data)
    return message


def encode_json(message: Message) -> str:
    """Compact JSON of a message (the wire form of one stream entry's ``m`` field)."""
    return json.dumps(message.to_dict(), separators=(",", ":"))


def decode_json(raw: str | bytes) -> Message:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MessageError(f"not JSON: {exc}") from exc
    return decode_message(data)
