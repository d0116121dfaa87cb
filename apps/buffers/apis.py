"""Buffer endpoints (artos §4): definitions (declare, list, get, delete; a whole workflow's
buffers and triggers at once, and back) and experience (push, gather, sample, priorities,
stats). A job key sees its own job's buffers only; another job's buffer is a 404.

Definitions are checked by ``apps.buffers.rules`` (the admin runs the same); experience goes to
the buffer service through ``apps.buffers.experience``; a service that cannot be reached is a
503 with ``Retry-After``, never a 500.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.buffers import experience, rules, selectors, services
from apps.buffers.dataplane import BufferServiceRefused, BufferServiceUnavailable
from apps.buffers.models import Buffer, BufferSnapshot, SamplerKind, SyncMode, Trigger
from apps.buffers.records import RecordError
from apps.jobs.access import principal_of
from apps.jobs.selectors import job_for_submit
from controlplane.api.errors import ApiError, Conflict
from controlplane.api.fields import INT64_MAX
from controlplane.api.views import CursorListView

T = TypeVar("T")
MAX_ACTOR_LENGTH = 200


class ServiceUnavailable(ApiError):
    """503 with ``Retry-After``: the buffer service is not reachable now."""

    wait = 1

    def __init__(self, reason: str) -> None:
        super().__init__(field="buffer_service", reason=reason, status_code=503)


def forwarded(operation: Callable[[], T]) -> T:
    """Run an experience operation, its failures as the API's error shape."""
    try:
        return operation()
    except RecordError as error:
        raise ApiError(field=error.field, reason=error.reason) from error
    except BufferServiceRefused as error:
        raise ApiError(field=error.field, reason=error.reason, status_code=error.status) from error
    except BufferServiceUnavailable as error:
        raise ServiceUnavailable(str(error)) from error


class TriggerOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = Trigger
        fields = ["name", "kind", "params", "target", "enabled"]
        read_only_fields = fields


class BufferOutputSerializer(serializers.ModelSerializer):
    triggers = TriggerOutputSerializer(many=True, read_only=True)
    prioritised = serializers.BooleanField(read_only=True)
    service_name = serializers.CharField(
        read_only=True, help_text="the buffer's name in the buffer service"
    )

    class Meta:
        model = Buffer
        fields = [
            "id",
            "job",
            "name",
            "schema",
            "capacity",
            "eviction",
            "sampler",
            "sync_mode",
            "prioritised",
            "config",
            "triggers",
            "service_name",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class TriggerInputSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=100)
    kind = serializers.CharField(max_length=16, help_text="data_key, object_key, time, transfer")
    params = serializers.JSONField(help_text="as the trigger primitive's constructor takes them")
    target = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    enabled = serializers.BooleanField(required=False, default=True)


class BufferFieldsSerializer(serializers.Serializer):
    """A buffer's own fields; what is left out follows ``rules.with_defaults``."""

    name = serializers.SlugField(max_length=100)
    schema = serializers.JSONField()
    capacity = serializers.IntegerField(max_value=INT64_MAX, min_value=-INT64_MAX)
    eviction = serializers.CharField(max_length=16, required=False)
    sampler = serializers.ChoiceField(choices=SamplerKind.choices, required=False)
    sync_mode = serializers.ChoiceField(choices=SyncMode.choices, required=False)
    prioritised = serializers.BooleanField(required=False)
    config = serializers.JSONField(required=False, default=dict)

    def validate_config(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be an object")
        return value


def buffer_spec(
    values: dict[str, Any], triggers: list[services.TriggerSpec]
) -> services.BufferSpec:
    return services.BufferSpec(
        name=values["name"],
        schema=values["schema"],
        capacity=values["capacity"],
        eviction=values["eviction"],
        sampler=values["sampler"],
        sync_mode=values["sync_mode"],
        config=values.get("config", {}),
        triggers=triggers,
    )


def trigger_spec(values: dict[str, Any]) -> services.TriggerSpec:
    return services.TriggerSpec(
        name=values["name"],
        kind=values["kind"],
        params=values["params"],
        target=values.get("target", ""),
        enabled=values.get("enabled", True),
    )


class BufferListCreateApi(CursorListView):
    """GET: the buffers visible to the caller. POST: declare one buffer with its triggers."""

    serializer_class = BufferOutputSerializer

    class FilterSerializer(serializers.Serializer):
        job = serializers.IntegerField(required=False, min_value=1, max_value=INT64_MAX)

    class InputSerializer(BufferFieldsSerializer):
        job = serializers.IntegerField(
            required=False, min_value=1, max_value=INT64_MAX, help_text="staff only; job keys omit"
        )
        triggers = TriggerInputSerializer(many=True, required=False, default=list)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            values, errors = rules.with_defaults(attrs)
            errors |= rules.definition_errors(values, values["triggers"])
            if errors:
                raise serializers.ValidationError(errors)
            return values

    def get_queryset(self) -> Any:
        return selectors.buffer_list(
            principal=principal_of(self.request), job_id=self.filters().get("job")
        )

    @extend_schema(parameters=[FilterSerializer])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(request=InputSerializer, responses={201: BufferOutputSerializer})
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        values = serializer.validated_data
        job = job_for_submit(request=request, job_id=values.get("job"))
        spec = buffer_spec(values, [trigger_spec(t) for t in values["triggers"]])
        try:
            buffer = services.buffer_create(job=job, spec=spec)
        except services.BufferExistsError as error:
            raise Conflict(field="name", reason=str(error)) from error
        buffer = selectors.buffer_get(principal=principal_of(request), buffer_id=buffer.pk)
        return Response(BufferOutputSerializer(buffer).data, status=status.HTTP_201_CREATED)


class BufferDetailApi(APIView):
    @extend_schema(responses=BufferOutputSerializer)
    def get(self, request: Request, buffer_id: int) -> Response:
        buffer = selectors.buffer_get(principal=principal_of(request), buffer_id=buffer_id)
        return Response(BufferOutputSerializer(buffer).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, buffer_id: int) -> Response:
        buffer = selectors.buffer_get(principal=principal_of(request), buffer_id=buffer_id)
        services.buffer_delete(buffer=buffer)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WorkflowTriggerSerializer(TriggerInputSerializer):
    buffer = serializers.SlugField(max_length=100)


class BufferWorkflowApi(APIView):
    """A workflow's buffers and triggers in ``Workflow.to_json``'s shape: POST declares them
    all (or none), GET answers them back. Actors and the learner are the program's, not
    definitions: they are not stored."""

    class QuerySerializer(serializers.Serializer):
        job = serializers.IntegerField(
            required=False, min_value=1, max_value=INT64_MAX, help_text="staff only; job keys omit"
        )

    class InputSerializer(serializers.Serializer):
        job = serializers.IntegerField(
            required=False, min_value=1, max_value=INT64_MAX, help_text="staff only; job keys omit"
        )
        buffers = BufferFieldsSerializer(many=True, allow_empty=False)
        triggers = WorkflowTriggerSerializer(many=True, required=False, default=list)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            errors: rules.Errors = {}
            buffers: list[dict[str, Any]] = []
            index_of: dict[str, int] = {}
            for index, raw in enumerate(attrs["buffers"]):
                values, problems = rules.with_defaults(raw)
                problems |= rules.buffer_errors(values)
                if values["name"] in index_of:
                    problems["name"] = [f"buffer {values['name']!r} declared twice"]
                index_of.setdefault(values["name"], index)
                errors |= {f"buffers[{index}].{f}": r for f, r in problems.items()}
                buffers.append({**values, "triggers": []})
            seen: set[tuple[str, str]] = set()
            for index, trigger in enumerate(attrs["triggers"]):
                prefix = f"triggers[{index}]"
                owner = index_of.get(trigger["buffer"])
                if owner is None:
                    errors[f"{prefix}.buffer"] = [f"no buffer {trigger['buffer']!r} declared"]
                    continue
                if (trigger["buffer"], trigger["name"]) in seen:
                    errors[f"{prefix}.name"] = [f"trigger {trigger['name']!r} declared twice"]
                seen.add((trigger["buffer"], trigger["name"]))
                schema = buffers[owner]["schema"]
                valid_schema = None if rules.schema_errors(schema) else schema
                problems = rules.trigger_errors(
                    trigger["kind"], trigger["params"], trigger["target"], valid_schema
                )
                errors |= {f"{prefix}.{f}": r for f, r in problems.items()}
                buffers[owner]["triggers"].append(trigger)
            if errors:
                raise serializers.ValidationError(errors)
            return {"job": attrs.get("job"), "buffers": buffers}

    class OutputSerializer(serializers.Serializer):
        buffers = serializers.ListField(
            child=serializers.DictField(),
            help_text="as Workflow.to_json lists them, plus sampler and sync_mode",
        )
        triggers = serializers.ListField(
            child=serializers.DictField(), help_text="buffer, name, kind, params, target, enabled"
        )

    query_serializers = {"GET": QuerySerializer}

    @extend_schema(parameters=[QuerySerializer], responses=OutputSerializer)
    def get(self, request: Request) -> Response:
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        buffers = selectors.buffer_list(
            principal=principal_of(request), job_id=query.validated_data.get("job")
        )
        return Response(selectors.workflow_definition(buffers=buffers))

    @extend_schema(request=InputSerializer, responses={201: BufferOutputSerializer(many=True)})
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        values = serializer.validated_data
        job = job_for_submit(request=request, job_id=values["job"])
        specs = [
            buffer_spec(b, [trigger_spec(t) for t in b["triggers"]]) for b in values["buffers"]
        ]
        try:
            created = services.buffers_import(job=job, specs=specs)
        except services.BufferExistsError as error:
            raise Conflict(field=f"buffers[{error.index}].name", reason=str(error)) from error
        buffers = selectors.buffer_list(principal=principal_of(request)).filter(
            pk__in=[buffer.pk for buffer in created]
        )
        body = BufferOutputSerializer(buffers, many=True).data
        return Response(body, status=status.HTTP_201_CREATED)


class BufferRecordsApi(APIView):
    """POST: push steps for one actor, checked against the buffer's schema."""

    class InputSerializer(serializers.Serializer):
        actor = serializers.CharField(max_length=MAX_ACTOR_LENGTH)
        records = serializers.JSONField(
            help_text="data key → one entry per step (token fields: a list of ids per step)"
        )

    class OutputSerializer(serializers.Serializer):
        steps = serializers.IntegerField()
        firings = serializers.IntegerField(help_text="trigger firings this push caused")

    @extend_schema(request=InputSerializer, responses={201: OutputSerializer})
    def post(self, request: Request, buffer_id: int) -> Response:
        buffer, values = _buffer_and_input(request, buffer_id, self.InputSerializer)
        body = forwarded(
            lambda: experience.records_push(
                buffer=buffer, actor=values["actor"], records=values["records"]
            )
        )
        return Response(body, status=status.HTTP_201_CREATED)


def _buffer_and_input(
    request: Request,
    buffer_id: int,
    input_class: type[serializers.Serializer],
    *,
    empty_ok: bool = False,
) -> tuple[Buffer, Any]:
    """The caller's buffer (404 if not its job's) and the request's validated input (400 naming
    the field); ``empty_ok``: a request without a body is its defaults."""
    buffer = selectors.buffer_get(principal=principal_of(request), buffer_id=buffer_id)
    serializer = input_class(data=(request.data or {}) if empty_ok else request.data)
    serializer.is_valid(raise_exception=True)
    return buffer, serializer.validated_data


def records_field() -> serializers.DictField:
    return serializers.DictField(
        child=serializers.JSONField(),
        help_text="data key → one entry per step (token fields: their ids, each cut to length)",
    )


def keys_field(help_text: str = "data keys to return (all when empty)") -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(max_length=200),
        required=False,
        default=list,
        help_text=help_text,
    )


class BufferGatherApi(APIView):
    """POST: steps ``[start, stop)`` of each named actor (pull what a trigger's firing names)."""

    class InputSerializer(serializers.Serializer):
        slices = serializers.DictField(
            child=serializers.ListField(
                child=serializers.IntegerField(min_value=0, max_value=INT64_MAX),
                min_length=2,
                max_length=2,
            ),
            allow_empty=False,
            help_text='actor → [start, stop), e.g. {"actor0": [0, 128]}',
        )
        keys = keys_field()

        def validate_slices(self, value: dict[str, list[int]]) -> dict[str, tuple[int, int]]:
            for actor, (start, stop) in value.items():
                if stop <= start:
                    raise serializers.ValidationError({actor: f"stop {stop} must exceed start"})
            return {actor: (start, stop) for actor, (start, stop) in value.items()}

    class OutputSerializer(serializers.Serializer):
        records = records_field()

    @extend_schema(request=InputSerializer, responses=OutputSerializer)
    def post(self, request: Request, buffer_id: int) -> Response:
        buffer, values = _buffer_and_input(request, buffer_id, self.InputSerializer)
        body = forwarded(
            lambda: experience.records_gather(
                buffer=buffer, slices=values["slices"], keys=values["keys"]
            )
        )
        return Response(body)


class BufferSampleApi(APIView):
    """POST: a batch drawn with the buffer's sampler (PER: with weights and slots; n-step: with
    the returns; FIFO per actor: one actor's next steps, in order, each once)."""

    class InputSerializer(serializers.Serializer):
        batch_size = serializers.IntegerField(
            required=False,
            min_value=1,
            max_value=1_000_000,
            help_text="not for full_batch; fifo_per_actor: the most steps (else one block)",
        )
        keys = keys_field()
        n = serializers.IntegerField(
            required=False, min_value=1, max_value=10_000, help_text="n_step: steps summed"
        )
        gamma = serializers.FloatField(
            required=False, min_value=0.0, max_value=1.0, help_text="n_step: the discount"
        )
        reward_key = serializers.CharField(
            required=False, max_length=200, help_text="n_step: the key holding each reward"
        )
        done_key = serializers.CharField(
            required=False, max_length=200, help_text="n_step: the key ending an episode"
        )
        last_keys = keys_field("n_step: keys read at each sum's last step (next_obs: bootstrap)")
        actor = serializers.CharField(
            required=False,
            max_length=MAX_ACTOR_LENGTH,
            help_text="fifo_per_actor: that actor's oldest waiting block (else any actor's)",
        )

    class OutputSerializer(serializers.Serializer):
        slots = serializers.ListField(
            child=serializers.IntegerField(), help_text="pass back with TD errors (PER)"
        )
        weights = serializers.ListField(
            child=serializers.FloatField(),
            required=False,
            help_text="prioritised only: importance-sampling weights",
        )
        records = records_field()
        n_step = serializers.DictField(
            required=False,
            help_text="n_step only: returns, discounts (gamma^m, 0 after a done), steps (m), "
            "last_slots and last (last_keys at each sum's last step)",
        )
        actor = serializers.CharField(required=False, help_text="fifo_per_actor: whose steps")
        steps = serializers.ListField(
            child=serializers.IntegerField(),
            required=False,
            help_text="fifo_per_actor: the actor's step numbers, in order",
        )

    @extend_schema(request=InputSerializer, responses=OutputSerializer)
    def post(self, request: Request, buffer_id: int) -> Response:
        buffer, values = _buffer_and_input(request, buffer_id, self.InputSerializer, empty_ok=True)
        options = {name: values.get(name) for name in experience.OPTION_OWNER}
        body = forwarded(
            lambda: experience.records_sample(
                buffer=buffer,
                batch_size=values.get("batch_size"),
                keys=values["keys"],
                options=options,
            )
        )
        return Response(body)


class BufferPrioritiesApi(APIView):
    """POST: PER priority updates from the learner's TD errors."""

    class InputSerializer(serializers.Serializer):
        slots = serializers.ListField(
            child=serializers.IntegerField(min_value=0, max_value=INT64_MAX),
            allow_empty=False,
            max_length=1_000_000,
        )
        td_errors = serializers.ListField(
            child=serializers.FloatField(), allow_empty=False, max_length=1_000_000
        )

    class OutputSerializer(serializers.Serializer):
        updated = serializers.IntegerField()

    @extend_schema(request=InputSerializer, responses=OutputSerializer)
    def post(self, request: Request, buffer_id: int) -> Response:
        buffer, values = _buffer_and_input(request, buffer_id, self.InputSerializer)
        body = forwarded(
            lambda: experience.priorities_update(
                buffer=buffer, slots=values["slots"], td_errors=values["td_errors"]
            )
        )
        return Response(body)


class BufferStatsApi(APIView):
    """GET: fill level, counters and trigger firings from the buffer service."""

    class OutputSerializer(serializers.Serializer):
        buffer = serializers.IntegerField()
        name = serializers.CharField()
        capacity = serializers.IntegerField()
        held = serializers.IntegerField(help_text="steps held")
        fill = serializers.FloatField(help_text="held / capacity")
        complete = serializers.IntegerField(help_text="steps with every key written")
        actors = serializers.IntegerField(help_text="actors that have written")
        objects = serializers.DictField(
            child=serializers.IntegerField(), help_text="model-data object → version"
        )
        firings = serializers.DictField(
            child=serializers.IntegerField(), help_text="trigger → firings so far"
        )
        steps_written = serializers.IntegerField()
        steps_dropped = serializers.IntegerField()
        steps_evicted = serializers.IntegerField()
        samples = serializers.IntegerField()
        fifo_waiting = serializers.IntegerField(
            help_text="complete steps not yet taken by the FIFO-per-actor sampler"
        )
        actor_states = serializers.ListField(
            child=serializers.DictField(),
            help_text="each workflow actor's latest report: workflow, actor, state, "
            "invocations, restored, cold, start-up waits (last, p50, p99), reported_at",
        )

    @extend_schema(responses=OutputSerializer)
    def get(self, request: Request, buffer_id: int) -> Response:
        buffer = selectors.buffer_get(principal=principal_of(request), buffer_id=buffer_id)
        return Response(forwarded(lambda: experience.buffer_stats(buffer=buffer)))


class SnapshotOutputSerializer(serializers.ModelSerializer):
    fill = serializers.FloatField(read_only=True, help_text="held / capacity")

    class Meta:
        model = BufferSnapshot
        fields = [
            "taken_at",
            "held",
            "fill",
            "complete",
            "actors",
            "steps_written",
            "steps_dropped",
            "steps_evicted",
            "samples",
            "firings",
        ]
        read_only_fields = fields


class BufferHistoryApi(APIView):
    """GET: the buffer's recorded snapshots (fill level, counters, firings), newest first."""

    class QuerySerializer(serializers.Serializer):
        since = serializers.DateTimeField(required=False, help_text="only snapshots after this")
        limit = serializers.IntegerField(required=False, default=100, min_value=1, max_value=1000)

    class OutputSerializer(serializers.Serializer):
        snapshots = SnapshotOutputSerializer(many=True)

    query_serializers = {"GET": QuerySerializer}

    @extend_schema(parameters=[QuerySerializer], responses=OutputSerializer)
    def get(self, request: Request, buffer_id: int) -> Response:
        buffer = selectors.buffer_get(principal=principal_of(request), buffer_id=buffer_id)
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = selectors.buffer_history(
            buffer=buffer,
            since=query.validated_data.get("since"),
            limit=query.validated_data["limit"],
        )
        return Response({"snapshots": SnapshotOutputSerializer(rows, many=True).data})
