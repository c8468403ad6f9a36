"""``VectorTrajectoryWriter``: one writer per environment of a vectorized
environment, fed by one ``append`` call per step (Reverb issue 52).

Every environment has its own episode, history, chunks and items -- exactly
what N separate ``TrajectoryWriter`` objects would give -- but a step for all
N environments is flattened once and appended in one call into C, with each
leaf carrying a leading environment axis.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from fastreplay import _core
from fastreplay.chunkers import ChunkerOptions
from fastreplay.table import Table
from fastreplay.writer import TrajectoryWriter, _Columns

__all__ = ["VectorTrajectoryWriter"]


class VectorTrajectoryWriter:
    """N per-environment TrajectoryWriters appended together.

    ``writer[e]`` is environment e's TrajectoryWriter: use its ``history``,
    ``create_item``, ``end_episode`` and ``episode_steps`` as usual.
    """

    def __init__(
        self,
        tables: Table | Iterable[Table] | Mapping[str, Table],
        num_envs: int,
        num_keep_alive_refs: int,
        *,
        validate_items: bool = True,
        chunk_store: _core.ChunkStore | None = None,
        seed: int | None = None,
        chunker_options: ChunkerOptions | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs ({num_envs}) must be a positive integer")
        if not isinstance(tables, (Table, Mapping)):
            tables = list(tables)
        self._envs = [
            TrajectoryWriter(
                tables, num_keep_alive_refs, validate_items=validate_items,
                chunk_store=chunk_store, chunker_options=chunker_options,
                seed=None if seed is None else seed + e,
            )
            for e in range(num_envs)
        ]
        self._columns = _Columns(self._add_column)
        for env in self._envs:
            env._columns = self._columns

    def _add_column(self, path: tuple[Any, ...]) -> None:
        for env in self._envs:
            env._add_column(path)

    def __len__(self) -> int:
        return len(self._envs)

    def __getitem__(self, env: int) -> TrajectoryWriter:
        return self._envs[env]

    def __iter__(self) -> Iterator[TrajectoryWriter]:
        return iter(self._envs)

    def append(self, data: Any, *, partial_step: bool = False) -> None:
        """Append one step for every environment: each leaf of ``data`` has a
        leading axis of length ``num_envs`` (row e goes to environment e).

        Every environment is validated before any is written.
        """
        for env in self._envs:
            env._check_open()
        # Environment 0's lock serializes this writer's threads (the shared
        # columns); append_batch then locks every environment in order.
        with self._envs[0]._core.lock:
            flat = self._columns.flatten(data)
            cols = [i for i, v in enumerate(flat) if v is not None]
            _core.append_batch([env._core for env in self._envs], cols,
                               [flat[i] for i in cols], partial_step)

    def configure(self, path: tuple[Any, ...], *, num_keep_alive_refs: int,
                  max_chunk_length: int | None) -> None:
        """``TrajectoryWriter.configure`` for every environment."""
        for env in self._envs:
            env.configure(path, num_keep_alive_refs=num_keep_alive_refs,
                          max_chunk_length=max_chunk_length)

    def end_episode(self, envs: int | Sequence[int] | None = None,
                    clear_buffers: bool = True, timeout_ms: int | None = None
                    ) -> None:
        """End the episode of the given environments (default: all)."""
        chosen = range(len(self._envs)) if envs is None else (
            [envs] if isinstance(envs, int) else envs)
        for e in chosen:
            self._envs[e].end_episode(clear_buffers, timeout_ms)

    def flush(self, block_until_num_items: int = 0, timeout_ms: int | None = None
              ) -> None:
        """Flush every environment's writer (each waits up to timeout_ms)."""
        for env in self._envs:
            env.flush(block_until_num_items, timeout_ms)

    @property
    def num_pending_items(self) -> int:
        return sum(env.num_pending_items for env in self._envs)

    def close(self) -> None:
        """Close every environment's writer (as ``TrajectoryWriter.close``)."""
        for env in self._envs:
            env.close()

    def __enter__(self) -> VectorTrajectoryWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """As each environment's ``TrajectoryWriter`` leaves its block."""
        for env in self._envs:
            env.__exit__(exc_type, exc, tb)
