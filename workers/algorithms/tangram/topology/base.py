"""The one interface every resource manager exposes to the scheduler (arl-tangram §5, Fig. 5).

Algorithm 1 needs four things from a topology: ``accommodate`` (can the FCFS prefix hold at
minimum units, *given the real topology*), a DP operator for the key elasticity resource,
``allocate`` (concrete cores / GPUs / quota units) and ``release``. A topology splits itself into
*groups* that are scheduled independently: a CPU node (§5.2: "CPU Manager independently performs
the scheduling algorithms for each node"), or the whole pool for GPUs and basic resources.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from workers.algorithms.tangram.action import ActionSpec
from workers.algorithms.tangram.dparrange import DPOperator

POOL_GROUP = "pool"


class WaitReason(StrEnum):
    """Why the head of the queue waits (shown on the dashboard)."""

    NO_CORES = "no cores free"
    NO_MEMORY = "no memory free"
    NO_GPUS = "no gpu chunk free"
    QUOTA = "quota exhausted"
    CONCURRENCY = "concurrency limit reached"
    SERVICE_LOADING = "service loading"
    NEVER_FITS = "demand exceeds pool capacity"
    NOT_IN_POOL = "resource not managed by this pool"
    SERVICE_NOT_LOADED = "service failed to load on every node that hosts it"


@dataclass(frozen=True)
class Placement:
    """Where an accommodated candidate will run: its scheduling group (node or pool)."""

    group: Hashable


@dataclass(frozen=True)
class Blocked:
    """A candidate that does not fit. ``group`` None: nothing after it may be scheduled (FCFS
    over the pool); otherwise only that group is closed for the rest of the pass."""

    reason: WaitReason
    group: Hashable | None = None


@dataclass(frozen=True)
class Allocation:
    """Concrete units handed to an agent: core ids, GPU ids, quota units, and the DoP."""

    action_id: str
    node: str
    units: Mapping[str, int]
    core_ids: tuple[int, ...] = ()
    gpu_ids: tuple[int, ...] = ()
    dop: int = 1
    load_seconds: float = 0.0
    extra: Mapping[str, object] = field(default_factory=dict)


class Accommodation(ABC):
    """Tentative state for one scheduling pass: Alg. 1 line 3, one candidate at a time."""

    @abstractmethod
    def add(self, spec: ActionSpec, units: Mapping[str, int]) -> Placement | Blocked:
        """Reserve ``units`` (normally the minimum) for ``spec`` if the topology can hold it."""

    @abstractmethod
    def dp_operator(
        self, group: Hashable, resource: str, fixed: Sequence[tuple[ActionSpec, Mapping[str, int]]]
    ) -> DPOperator:
        """The DP operator over ``resource`` in ``group`` once the ``fixed`` candidates (those
        that keep their minimum units) are placed: the scalable ones share what is left."""

    def restore_seconds(self, spec: ActionSpec, units: int) -> float:
        """Extra start-up time if ``spec`` ran on ``units`` of the key resource now (a GPU
        service restore); the DP operator's GetDuration adds it (Alg. 3 line 17)."""
        return 0.0

    @abstractmethod
    def all_groups_closed(self) -> bool:
        """True when no later candidate can be placed anywhere (the scan may stop)."""


class Topology(ABC):
    """A resource manager: Basic (§5.1), CPU (§5.2) or GPU (§5.3)."""

    kind: str = "abstract"
    # Whether any ``k`` released units of a key resource can serve one ``k``-unit allocation
    # (a node's cores can; GPU buddy chunks cannot): the Alg. 2 estimate's per-unit profile
    # assumes it, so only then does it explore wide allocations (``sizing.exploration_units``).
    units_interchangeable: bool = True

    @property
    @abstractmethod
    def resource_names(self) -> frozenset[str]:
        """The resources this topology manages; actions demanding others are rejected."""

    @property
    def arranged_resources(self) -> tuple[str, ...]:
        """Resources DPArrange can divide here, in preference order (Alg. 1 line 5 splits)."""
        return tuple(sorted(self.resource_names))

    def unit_counts(self, resource: str, counts: Sequence[int]) -> tuple[int, ...]:
        """The ``counts`` of ``resource`` this topology could ever hand one action.

        The scheduler narrows an elastic action's options with it before the DoP bounds, so
        that admission and DPArrange (Alg. 1 line 3, Alg. 3) work on one set the topology can
        really give; the default keeps every count.
        """
        return tuple(counts)

    def min_dop_cap(self, resource: str) -> int | None:
        """The most units of ``resource`` *every* group could give one action, or None.

        A policy's ``min_dop`` above it is lowered to it: an action pinned to a smaller group
        (a trajectory's node, §5.2) would otherwise wait forever for units that never come.
        """
        return None

    def dop_floors(self, specs: Iterable[ActionSpec]) -> dict[str, int]:
        """Per key resource, the fewest units an elastic action may get in this pass, given
        the actions the pool runs and the head of its queue (``specs``, read lazily); empty
        (the default) when the topology sets none. A prior narrowing each action's feasible
        set (arl-tangram §4.1), applied by the scheduler like ``min_dop``.
        """
        return {}

    @abstractmethod
    def never_fits(self, spec: ActionSpec) -> WaitReason | None:
        """A reason when even an empty pool could not run ``spec`` at its minimum units."""

    @abstractmethod
    def accommodation(self, now: float) -> Accommodation:
        """Start a pass's tentative view of the free resources."""

    @abstractmethod
    def allocate(
        self, spec: ActionSpec, group: Hashable, units: Mapping[str, int], now: float
    ) -> Allocation:
        """Take concrete units; must succeed for anything the pass's accommodation admitted."""

    @abstractmethod
    def release(self, action_id: str, now: float) -> None:
        """Return an action's units (quota consumed in its period stays consumed)."""

    def restore(
        self,
        spec: ActionSpec,
        node: str,
        units: Mapping[str, int],
        core_ids: Sequence[int],
        now: float,
    ) -> Allocation:
        """Re-take the units a running action held before a restart (crash recovery).

        The default suits topologies whose units are interchangeable; the CPU topology takes the
        exact cores back.
        """
        return self.allocate(spec, node, units, now)

    @abstractmethod
    def holdings(self) -> dict[str, dict[str, object]]:
        """Per node: free and used units, who holds what (dashboard introspection)."""

    def next_change(self, now: float) -> float | None:
        """When capacity next appears by itself (a quota period rolls over); None if never."""
        return None

    def end_trajectory(self, trajectory_id: str, now: float) -> None:  # noqa: B027
        """A trajectory finished: release what it reserved for its whole life (CPU memory)."""

    def service_loading(self, service: str, now: float) -> bool:
        """True when ``service`` is being restored onto GPUs right now (GPU topology only)."""
        return False
