"""What ``Client.server_info`` and ``Client.shard_info`` report."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from fastreplay.reverb_types import TableInfo

__all__ = ["ShardInfo", "merge_table_info"]

#: TableInfo fields summed over the shards (the rest come from shard 0).
_SUMMED = (
    "max_size",
    "current_size",
    "num_episodes",
    "num_deleted_episodes",
    "num_unique_samples",
    "num_inserts",
    "num_samples",
    "num_updates",
    "num_deletes",
    "num_evictions",
    "num_expired",
)


class ShardInfo(NamedTuple):
    """One shard of a ``ShardedServer`` as a client sees it."""

    shard: int
    node_id: str
    alive: bool
    restarts: int
    restored_from: str | None
    transport: str
    tables: dict[str, TableInfo]
    priority_mass: dict[str, float]
    host: str = ""
    port: int = 0


def merge_table_info(infos: list[TableInfo]) -> TableInfo:
    """One table's ``TableInfo`` over its shards: sizes, capacities and
    counters summed; configuration from the first."""
    first = infos[0]
    sums: dict[str, Any] = {f: sum(getattr(i, f) for i in infos) for f in _SUMMED}
    return dataclasses.replace(first, **sums)
