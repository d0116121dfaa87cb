"""The emulated engine's prefix cache: SGLang's radix cache (RadixAttention), in blocks.

SGLang keeps the KV of finished (and retracted) requests in a radix tree over token ids and
reuses the longest cached prefix of a new request, so a trajectory's next step prefills only
what it added since its last one; cached entries are evicted least recently used first whenever
the running requests need the memory (``--disable-radix-cache`` turns it off). This module keeps
the same cache at block granularity, as vLLM's automatic prefix caching does: a prompt's token
sequence is cut into blocks of ``block_tokens`` and each block is named by a hash chained over
every block before it, so a block is found only after its whole prefix. A partial last block
is never cached (at most ``block_tokens - 1`` tokens of a match are lost against SGLang's
token-granular tree).

Memory accounting is the simulator's bounded pool (``workers.sim.llm.kv``): a running request
counts its whole context, cached prefix included (a prefix two running requests share is
counted twice: conservative), and only blocks no running request uses are evictable. Blocks of
a sequence are installed tail first, so the least recently used end of a chain is its tail and
a chain is evicted from its end, never leaving an unreachable middle.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

__all__ = ["DEFAULT_BLOCK_TOKENS", "PrefixCache", "block_chain"]

DEFAULT_BLOCK_TOKENS = 16  # vLLM's default block size


def block_chain(tokens: Sequence[Hashable], block_tokens: int) -> list[int]:
    """The chained hashes of the full blocks of ``tokens`` (block ``i`` names blocks 0..i)."""
    chain: list[int] = []
    parent = 0
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        parent = hash((parent, tuple(tokens[start : start + block_tokens])))
        chain.append(parent)
    return chain


class PrefixCache:
    """Cached blocks by chained hash, with the number of running requests using each."""

    def __init__(self, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be >= 1")
        self.block_tokens = block_tokens
        self._users: OrderedDict[int, int] = OrderedDict()  # least recently used first
        self._evictable = 0  # blocks no running request uses
        self.evicted_tokens = 0

    @property
    def cached_tokens(self) -> int:
        return len(self._users) * self.block_tokens

    @property
    def evictable_tokens(self) -> int:
        return self._evictable * self.block_tokens

    def acquire(self, chain: Sequence[int], limit_tokens: int) -> int:
        """A request starts running: the tokens of its longest cached prefix (at most
        ``limit_tokens``), whose blocks are now in use and not evictable until ``release``."""
        matched = 0
        for block in chain[: max(0, limit_tokens) // self.block_tokens]:
            users = self._users.get(block)
            if users is None:
                break
            if users == 0:
                self._evictable -= 1
            self._users[block] = users + 1
            self._users.move_to_end(block)
            matched += 1
        return matched * self.block_tokens

    def release(self, chain: Sequence[int], acquired_tokens: int, sequence: Sequence[int]) -> None:
        """A request stopped running: the blocks it used are released and every full block of
        its ``sequence`` (prompt and generated tokens, as chained hashes) is cached, most
        recently used, tail installed first (module docstring)."""
        for block in chain[: acquired_tokens // self.block_tokens]:
            users = self._users[block]  # in use since ``acquire``: never evicted
            self._users[block] = users - 1
            if users == 1:
                self._evictable += 1
        for block in reversed(sequence):
            if block in self._users:
                self._users.move_to_end(block)
            else:
                self._users[block] = 0
                self._evictable += 1

    def trim(self, free_tokens: float) -> None:
        """Evict unused blocks, least recently used first, until they fit in ``free_tokens``."""
        if self.evictable_tokens <= free_tokens:
            return
        victims: list[int] = []
        still_cached = self._evictable
        for block, users in self._users.items():  # least recently used first
            if still_cached * self.block_tokens <= free_tokens:
                break
            if not users:
                victims.append(block)
                still_cached -= 1
        for block in victims:
            del self._users[block]
        self._evictable = still_cached
        self.evicted_tokens += len(victims) * self.block_tokens
