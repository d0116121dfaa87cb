from tests.apps.dashboard.conftest import (  # noqa: F401  (shared fixtures)
    cpu_node,
    cpu_pool,
    job,
    operator_user,
)
