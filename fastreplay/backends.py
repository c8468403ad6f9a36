"""What ``Client`` talks to: the tables of a server of this process
(``LocalBackend``) or of another process (``fastreplay.net.remote.
RemoteBackend``).  Both offer the same calls; ``Client`` adds Reverb's
argument handling and nest unpacking on top."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fastreplay import _core, _structures
from fastreplay.replay_sample import ReplaySample, SampleInfoBatch
from fastreplay.table import Table, TableInfo

if TYPE_CHECKING:
    from fastreplay.server import Server

__all__ = ["Backend", "LocalBackend"]


class Backend(Protocol):
    def info(self, timeout: float | None = None) -> dict[str, TableInfo]: ...

    def table_info(self, table: str) -> TableInfo: ...

    def staging(self) -> tuple[dict[str, Table], _core.ChunkStore, Any]:
        """``(tables, chunk_store, sink)`` for writers: the tables their
        items go into and the sink that carries them on (None locally)."""
        ...

    def sample_batch(self, table: str, n: int, timeout: float | None,
                     meta: dict[str, Any] | None = None
                     ) -> tuple[SampleInfoBatch, list[np.ndarray], Any]:
        """``meta`` (when given) receives the table's ``"mass"`` and
        ``"size"`` read right after sampling."""
        ...

    def sample_batch_begin(self, table: str, n: int, timeout: float | None
                           ) -> Callable[..., tuple[SampleInfoBatch,
                                                    list[np.ndarray], Any]]:
        """``sample_batch`` in two halves: the request goes out now, the
        returned function (taking ``meta``) gives the batch."""
        ...

    def sample_items(self, table: str, n: int, timeout: float | None = None
                     ) -> list[ReplaySample]: ...

    def mutate_priorities(self, table: str, updates: Mapping[int, float] | None,
                          deletes: Iterable[int] | None) -> None: ...

    def update_priorities(self, table: str, keys: Any, priorities: Any) -> None: ...

    def reset(self, table: str) -> None: ...

    def checkpoint(self) -> str: ...

    def metrics(self) -> dict[str, float]: ...


class LocalBackend:
    """The tables of a ``Server`` of this process, called directly."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._tables = server.tables

    def _table(self, name: str) -> Table:
        table = self._tables.get(name)
        if table is None:
            raise ValueError(
                f'Could not find table "{name}". The following tables exists: '
                f"{', '.join(sorted(self._tables))}"
            )
        return table

    def info(self, timeout: float | None = None) -> dict[str, TableInfo]:
        return {name: t.info for name, t in self._tables.items()}

    def table_info(self, table: str) -> TableInfo:
        return self._table(table).info

    def staging(self) -> tuple[dict[str, Table], _core.ChunkStore, Any]:
        return self._tables, self._server.chunk_store, None

    def sample_batch(self, table: str, n: int, timeout: float | None,
                     meta: dict[str, Any] | None = None
                     ) -> tuple[SampleInfoBatch, list[np.ndarray], Any]:
        target = self._table(table)
        info, columns, sid = target.sample_batch(n, timeout=timeout)
        if meta is not None:
            meta["mass"], meta["size"] = target.mass_and_size()
        structure = (target.signature if target.signature is not None
                     else _structures.get(sid))
        return info, columns, structure

    def sample_batch_begin(self, table: str, n: int, timeout: float | None
                           ) -> Callable[..., tuple[SampleInfoBatch,
                                                    list[np.ndarray], Any]]:
        meta: dict[str, Any] = {}
        got = self.sample_batch(table, n, timeout, meta)  # in process: now

        def finish(into: dict[str, Any] | None = None
                   ) -> tuple[SampleInfoBatch, list[np.ndarray], Any]:
            if into is not None:
                into.update(meta)
            return got

        return finish

    def sample_items(self, table: str, n: int, timeout: float | None = None
                     ) -> list[ReplaySample]:
        return self._table(table).sample_items(n, timeout=timeout)

    def mutate_priorities(self, table: str, updates: Mapping[int, float] | None,
                          deletes: Iterable[int] | None) -> None:
        self._table(table).mutate_priorities(updates, deletes)

    def update_priorities(self, table: str, keys: Any, priorities: Any) -> None:
        self._table(table).update_priorities(keys, priorities)

    def reset(self, table: str) -> None:
        self._table(table).reset()

    def checkpoint(self) -> str:
        return self._server.checkpoint()

    def metrics(self) -> dict[str, float]:
        return self._server.metrics()
