"""A worker's KV memory: the running requests' KV plus an LRU prefix cache (SGLang's radix cache,
one entry per ``cache_key``, i.e. per trajectory).

Two accountings, one per latency model (``workers.sim.llm.cost``):

- bounded pool (``"context"``): running requests hold ``active`` tokens; a running request's cache
  entry is taken out of the cache while it runs and put back, grown, when it leaves; cached
  entries are evicted, least recently used first, whenever ``active + cached`` would pass the
  pool (admission, growth, a migrated KV arriving);
- cache-only bound (``"legacy"``): the KV of running requests is free; cache entries stay
  resident (pinned) while their request runs and only the cache is bounded.
"""

from __future__ import annotations

from collections import OrderedDict


class KVPool:
    def __init__(
        self, capacity_tokens: float, *, cache_capacity_tokens: float, pin_running: bool
    ) -> None:
        self.capacity = capacity_tokens
        self.cache_capacity = cache_capacity_tokens
        self.pin_running = pin_running
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._pinned: dict[str, int] = {}
        self.cache_total = 0
        self.evicted_tokens = 0

    def cached(self, key: str) -> int:
        return self._cache.get(key, 0)

    def free_tokens(self, active: float) -> float:
        return self.capacity - active - (0 if self.pin_running else self.cache_total)

    def can_hold(self, key: str, active: float, needed: float) -> bool:
        """Whether ``needed`` more active tokens fit once every other entry is evicted (SGLang
        counts the radix cache's evictable tokens as available when it admits)."""
        if self.pin_running:
            return True
        return self.capacity - active - self._cache.get(key, 0) >= needed

    def acquire(self, key: str, active: float, needed: float) -> bool:
        """Make room for ``needed`` more active tokens, evicting other entries least recently used
        first; ``False``, evicting nothing, if even an empty cache would not hold them (SGLang
        evicts only to allocate for a request it admits, never for one it turns away)."""
        if not self.can_hold(key, active, needed):
            return False
        if not self.pin_running:
            self._evict(self.capacity - active - needed, keep=key)
        return True

    def admit(self, key: str | None) -> int:
        """The request keyed ``key`` starts running: returns its resident prefix tokens."""
        if key is None:
            return 0
        if self.pin_running:
            self._pinned[key] = self._pinned.get(key, 0) + 1
            return self._cache.get(key, 0)
        tokens = self._cache.pop(key, 0)
        self.cache_total -= tokens
        return tokens

    def release(self, key: str | None, tokens: int, active_after: float) -> None:
        """The request keyed ``key`` stopped running holding ``tokens`` of KV: cache them."""
        if key is None:
            return
        self.unpin(key)
        self.insert(key, tokens, active_after)

    def unpin(self, key: str | None) -> None:
        """A running request keyed ``key`` stopped (legacy: its entry becomes evictable)."""
        if key is None or not self.pin_running:
            return
        count = self._pinned.get(key, 0) - 1
        if count <= 0:
            self._pinned.pop(key, None)
        else:
            self._pinned[key] = count

    def insert(self, key: str, tokens: int, active: float) -> bool:
        """Install (or grow) a prefix; ``False`` when the pool cannot hold it next to ``active``."""
        if not self.pin_running and tokens > self.capacity - active:
            return False
        old = self._cache.get(key, 0)
        new = max(tokens, old)
        self._cache[key] = new
        self.cache_total += new - old
        self._cache.move_to_end(key)
        self.trim(active)
        return key in self._cache

    def drop(self, key: str) -> None:
        if key in self._pinned:
            return
        self.cache_total -= self._cache.pop(key, 0)

    def trim(self, active: float) -> None:
        """Evict least recently used entries until the cache fits beside ``active``."""
        if self.pin_running:
            self._evict(self.cache_capacity, keep=None)
        else:
            self._evict(self.capacity - active, keep=None)

    def _evict(self, budget: float, keep: str | None) -> None:
        if self.cache_total <= budget:
            return
        for key in list(self._cache):
            if self.cache_total <= budget:
                break
            if key == keep or key in self._pinned:
                continue
            tokens = self._cache.pop(key)
            self.cache_total -= tokens
            self.evicted_tokens += tokens
