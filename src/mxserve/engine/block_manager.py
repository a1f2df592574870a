"""BlockManager: hands out cache pages of several pools to requests (pure Python, no torch).

Each request owns one block table per pool: the page ids that hold its entries in order, so that
entry i of the request lives at `table[i // block_size] * block_size + i % block_size`. Tables only
grow while a request runs, and they grow in every pool at once or not at all: a step that could
get window pages but no compressed-KV pages must not keep the window pages (they would leak into
a request that is about to be preempted).

No prefix caching: DeepSeek-V4's compressor state rows and the partially filled compression
window at a prefix's end make "these positions are cached" a per-pool, per-position question,
not a page-hash lookup as in nano-vllm. Sharing would need the state rows at the boundary too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from mxserve.engine.pool_spec import PoolSpec
from mxserve.engine.request import Request

BlockTables = Mapping[str, tuple[int, ...]]  # pool name → page ids, read-only


class BlockManager:
    """Pages of every pool, and the tables of the requests that hold them."""

    def __init__(self, pool_specs: Iterable[PoolSpec]) -> None:
        specs = tuple(pool_specs)
        if not specs:
            raise ValueError("BlockManager needs at least one PoolSpec")
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        self.pool_specs: dict[str, PoolSpec] = {spec.name: spec for spec in specs}
        # A stack per pool, lowest id on top, so a fresh manager hands out 0, 1, 2, … (readable tests).
        self._free_pages: dict[str, list[int]] = {
            spec.name: list(range(spec.num_blocks - 1, -1, -1)) for spec in specs
        }
        self._tables: dict[str, dict[str, list[int]]] = {}  # request id → pool name → pages
        self._num_positions: dict[str, int] = {}  # request id → positions its tables cover
        # Read-only snapshots handed to SchedulerOutput; rebuilt only when a table grows, so a
        # decode step costs a dict lookup, not a copy of a 256K-token table.
        self._table_views: dict[str, BlockTables] = {}
        self._no_tables: BlockTables = MappingProxyType({spec.name: () for spec in specs})
        # request id → the most positions its pages hold in every pool (PoolSpec.max_positions): a
        # chunk ending there needs no page; rebuilt with the view
        self._capacity: dict[str, int] = {}

    # ------------------------------------------------------------------ queries
    def num_free(self, pool: str) -> int:
        return len(self._free_pages[pool])

    def num_total(self, pool: str) -> int:
        return self.pool_specs[pool].num_blocks

    def usage(self, pool: str | None = None) -> float:
        """Fraction of pages in use, in [0, 1]; with no pool, the fullest pool's fraction (the one
        that limits admission)."""
        pools = [pool] if pool is not None else list(self.pool_specs)
        return max(1.0 - self.num_free(p) / self.num_total(p) for p in pools)

    def is_all_free(self) -> bool:
        return all(self.num_free(p) == self.num_total(p) for p in self.pool_specs)

    def num_positions(self, request: Request) -> int:
        """Token positions [0, n) the request's tables cover (0 when it holds no pages)."""
        return self._num_positions.get(request.request_id, 0)

    def block_tables(self, request: Request) -> BlockTables:
        """Pool name → the request's page ids (empty tuples when it holds nothing)."""
        return self._table_views.get(request.request_id, self._no_tables)

    def fits_at_all(self, num_positions: int) -> bool:
        """Whether one sequence of that many positions fits in the empty pools."""
        return all(spec.pages_needed(num_positions) <= spec.num_blocks for spec in self.pool_specs.values())

    # ------------------------------------------------------------------ allocation
    def _new_pages_needed(self, request: Request, num_new_tokens: int) -> dict[str, int]:
        if num_new_tokens < 0:
            raise ValueError(f"num_new_tokens must be >= 0, got {num_new_tokens}")
        end_pos = request.num_computed_tokens + num_new_tokens
        tables = self._tables.get(request.request_id, {})
        return {
            name: max(spec.pages_needed(end_pos) - len(tables.get(name, ())), 0)
            for name, spec in self.pool_specs.items()
        }

    def can_allocate(self, request: Request, num_new_tokens: int) -> bool:
        """Whether every pool has the pages to cover positions
        [0, request.num_computed_tokens + num_new_tokens)."""
        needed = self._new_pages_needed(request, num_new_tokens)
        return all(count <= len(self._free_pages[name]) for name, count in needed.items())

    def allocate(self, request: Request, num_new_tokens: int) -> bool:
        """Grow the request's tables so they cover [0, num_computed_tokens + num_new_tokens).
        All pools or none: returns False and changes nothing when any pool is short."""
        request_id = request.request_id
        end_pos = request.num_computed_tokens + num_new_tokens
        if num_new_tokens >= 0 and end_pos <= self._capacity.get(request_id, -1):
            # Most decode steps: the pages held already fit end_pos in every pool (no pool needs a
            # page), so skip the per-pool sums; the tables and their view are unchanged.
            self._num_positions[request_id] = max(self._num_positions[request_id], end_pos)
            return True
        needed = self._new_pages_needed(request, num_new_tokens)
        if any(count > len(self._free_pages[name]) for name, count in needed.items()):
            return False
        tables = self._tables.setdefault(request_id, {name: [] for name in self.pool_specs})
        grew = request_id not in self._table_views
        for name, count in needed.items():
            free = self._free_pages[name]
            for _ in range(count):
                tables[name].append(free.pop())
            grew = grew or count > 0
        self._num_positions[request_id] = max(self._num_positions.get(request_id, 0), end_pos)
        if grew:
            self._table_views[request_id] = MappingProxyType({name: tuple(t) for name, t in tables.items()})
            self._capacity[request_id] = min(spec.max_positions(len(tables[name]))
                                             for name, spec in self.pool_specs.items())
        return True

    def free(self, request: Request) -> None:
        """Return every page the request holds to its pool. Freeing a request that holds
        nothing is a no-op (abort may follow a natural finish)."""
        request_id = request.request_id
        tables = self._tables.pop(request_id, None)
        self._num_positions.pop(request_id, None)
        self._table_views.pop(request_id, None)
        self._capacity.pop(request_id, None)
        if tables is None:
            return
        for name, pages in tables.items():
            # Reversed so the pages go back on the stack in the order they left it.
            self._free_pages[name].extend(reversed(pages))
