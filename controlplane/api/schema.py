"""OpenAPI helpers: the error component and the 4xx responses every operation can return."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema

ERROR_CODES = {
    "400": "The request is malformed; each error names the field and the reason.",
    "401": "Missing, wrong or revoked API key.",
    "403": "The key or user may not do this.",
    "404": "No such object, or not visible to this key.",
    "405": "Method not allowed.",
    "406": "Not acceptable.",
    "409": "The object's state forbids the change.",
    "415": "Unsupported media type (send application/json).",
}


def add_error_responses(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """Postprocessing hook: every operation documents the shared error responses."""
    error_ref = {"$ref": "#/components/schemas/ErrorResponse"}
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault(
        "ErrorResponse",
        {
            "type": "object",
            "properties": {
                "errors": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "field": {"type": "string"},
                            "reason": {"type": "string"},
                        },
                        "required": ["field", "reason"],
                    },
                }
            },
            "required": ["errors"],
        },
    )
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            for code, description in ERROR_CODES.items():
                responses.setdefault(
                    code,
                    {
                        "description": description,
                        "content": {"application/json": {"schema": error_ref}},
                    },
                )
    return result


# OpenAPI links (3.0 §4.7.21): where an action's id, once an operation answers with it, can go
# next. Clients and generators (schemathesis' stateful runs) follow them: submit → get, cancel,
# result, await.
_ACTION_ID = "$response.body#/id"
_FIRST_BATCH_ID = "$response.body#/items/0/id"


def _action_links(action_id: str) -> dict[str, Any]:
    by_id = {"action_id": action_id}
    return {
        "GetAction": {"operationId": "actions_retrieve", "parameters": by_id},
        "CancelAction": {"operationId": "actions_cancel_create", "parameters": by_id},
        "ActionResult": {"operationId": "actions_result_retrieve", "parameters": by_id},
        "AwaitAction": {"operationId": "actions_await_create", "requestBody": {"ids": [action_id]}},
    }


ACTION_LINKS = {
    ("actions_create", "201"): _action_links(_ACTION_ID),
    ("actions_create", "200"): _action_links(_ACTION_ID),
    ("actions_batch_create", "201"): _action_links(_FIRST_BATCH_ID),
    ("actions_cancel_create", "200"): _action_links(_ACTION_ID),
}


def add_action_links(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """Postprocessing hook: the ``ACTION_LINKS`` of each operation's responses."""
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict):
                continue
            for code, response in operation.get("responses", {}).items():
                links = ACTION_LINKS.get((str(operation.get("operationId")), str(code)))
                if links is not None:
                    response["links"] = links
    return result


class LoomAutoSchema(AutoSchema):
    """Names nested serializers after their view: ``ActionBatchApi.InputSerializer`` →
    ``ActionBatchInput``, so every endpoint can own an ``InputSerializer`` (STYLE.md §2)."""

    def get_serializer_name(
        self, serializer: Any, direction: Literal["request", "response"]
    ) -> str:
        cls = type(serializer)
        outer, _, inner = cls.__qualname__.rpartition(".")
        if not outer:
            return str(super().get_serializer_name(serializer, direction))
        return outer.removesuffix("Api").removesuffix("ViewSet") + inner.removesuffix("Serializer")


class BearerKeyScheme(OpenApiAuthenticationExtension):
    target_class = "apps.jobs.authentication.BearerKeyAuthentication"
    name = "BearerKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "a job key (sees its job) or a staff key (sees all): loom_…",
        }


class NodeTokenScheme(OpenApiAuthenticationExtension):
    target_class = "apps.resources.apis.NodeTokenAuthentication"
    name = "NodeToken"
    priority = 1

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer", "description": "a node token: loomnode_…"}
