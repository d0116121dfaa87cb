"""Property-based API test: generated requests never get a 500, responses match the schema.

Runs in-process against the WSGI app (schemathesis 4 ``from_wsgi``) as a staff key, with a few
examples per operation so the whole run stays well under a minute; LOOM_FUZZ_EXAMPLES=200 for a
longer hunt.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from controlplane.wsgi import application
from tests.factories import (
    ActionFactory,
    ApiQuotaFactory,
    JobFactory,
    NodeFactory,
    PolicyFactory,
    PoolFactory,
    ServiceFactory,
    StaffFactory,
    ToolFactory,
    TrajectoryFactory,
    make_key,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def staff_headers(db: Any, keep_test_connection: Any) -> dict[str, str]:
    staff = StaffFactory.create(username="fuzzer")
    _, raw = make_key(user=staff)
    pool = PoolFactory.create(name="cpu", kind="cpu")
    job = JobFactory.create(name="fuzz", owner=staff)
    tool = ToolFactory.create(name="sandbox", pool=pool)
    ServiceFactory.create(name="rm")
    ApiQuotaFactory.create(name="search")
    NodeFactory.create(pool=pool)
    PolicyFactory.create(name="sched")
    trajectory = TrajectoryFactory.create(job=job)
    for _ in range(3):
        ActionFactory.create(job=job, tool=tool, trajectory=trajectory, pool=pool)
    return {"Authorization": f"Bearer {raw}"}


# Loading the schema touches no database (no credentials, no session), so it can happen at import.
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/?format=json", application)


@schema.parametrize()
@settings(
    max_examples=int(os.environ.get("LOOM_FUZZ_EXAMPLES", "4")),
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@pytest.mark.slow
def test_api_never_500s_and_matches_its_schema(case: Any, staff_headers: dict[str, str]) -> None:
    if case.path.endswith("/result/") and case.query:
        case.query["wait"] = 0  # the wait itself is tested elsewhere; keep the fuzzing fast
    case.call_and_validate(headers=staff_headers, checks=CHECKS)
