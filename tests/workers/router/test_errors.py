"""Bad input, keys and trajectories: the REST API's and OpenAI's error shapes in one body."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.workers.router.conftest import KEY, MODEL, OTHER_KEY, Stack

pytestmark = pytest.mark.redis

BODY = {"model": MODEL, "prompt": "x", "max_tokens": 2}


async def post(stack: Stack, body: object, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        if isinstance(body, str):
            return await http.post("/v1/completions", content=body, headers=headers)
        return await http.post("/v1/completions", json=body, headers=headers)


def auth(key: str = KEY, trajectory: str | None = "t-err") -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"}
    if trajectory is not None:
        headers["X-Loom-Trajectory"] = trajectory
    return headers


def field_of(response: httpx.Response) -> str:
    body = response.json()
    assert body["error"]["param"] == body["errors"][0]["field"]
    return str(body["errors"][0]["field"])


async def test_malformed_bodies_are_400_naming_the_field(stack: Stack) -> None:
    await stack.trajectory("t-err")
    cases = [
        ("{nope", "body"),
        ([1, 2], "body"),
        ({"model": MODEL}, "prompt"),
        ({**BODY, "max_tokens": -1}, "max_tokens"),
        ({**BODY, "stream": "yes"}, "stream"),
        ({"prompt": "x"}, "model"),
    ]
    for body, field in cases:
        response = await post(stack, body, auth())
        assert response.status_code == 400, body
        assert field_of(response) == field


async def test_unknown_model_is_404(stack: Stack) -> None:
    await stack.trajectory("t-err")
    response = await post(stack, {**BODY, "model": "gpt-9"}, auth())
    assert response.status_code == 404 and field_of(response) == "model"
    assert response.json()["error"]["code"] == "model_not_found"


async def test_keys_are_checked_against_the_control_planes_registry(stack: Stack) -> None:
    await stack.trajectory("t-err")
    missing = await post(stack, BODY, {"X-Loom-Trajectory": "t-err"})
    unknown = await post(stack, BODY, auth(key="loom_not_a_key"))
    assert missing.status_code == unknown.status_code == 401
    assert field_of(missing) == field_of(unknown) == "Authorization"


async def test_unknown_and_foreign_trajectories_are_404_alike(stack: Stack) -> None:
    await stack.trajectory("t-mine", job="7")
    unknown = await post(stack, BODY, auth(trajectory="t-nobody"))
    foreign = await post(stack, BODY, auth(key=OTHER_KEY, trajectory="t-mine"))
    for response in (unknown, foreign):
        assert response.status_code == 404 and field_of(response) == "X-Loom-Trajectory"
        assert "not visible to this key" in response.json()["errors"][0]["reason"]
    missing = await post(stack, BODY, auth(trajectory=None))
    assert missing.status_code == 400 and field_of(missing) == "X-Loom-Trajectory"


async def test_the_openai_client_raises_its_own_errors(stack: Stack) -> None:
    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError) as not_found:
        await client.completions.create(
            model=MODEL, prompt="x", extra_headers={"X-Loom-Trajectory": "t-none"}
        )
    assert not_found.value.status_code == 404
    with pytest.raises(openai.AuthenticationError):
        await openai.AsyncOpenAI(
            base_url=f"{stack.url}/v1", api_key="wrong", max_retries=0
        ).models.list()
