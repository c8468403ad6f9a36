"""Chunker options (Reverb's ``pybind.ConstantChunkerOptions`` and
``AutoTunedChunkerOptions``): how a writer column groups cells into chunks.

A longer chunk compresses better and costs less bookkeeping per step, but a
sampled item drags its whole chunks along, so for short items shorter chunks
are cheaper to read.  ``AutoTunedChunkerOptions`` searches that trade-off
per column with Reverb's algorithm: it starts at length 1 and, every 10 items
and 5 chunks, steps +2 or -1 toward a lower
``bytes per stored step + throughput_weight * bytes per sampled step``,
within ``[1, num_keep_alive_refs]``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COMPRESSIONS", "AutoTunedChunkerOptions", "ConstantChunkerOptions",
           "compression_mode"]

#: A column's compression choices: ``'auto'`` (LZ4 for rows of 256 bytes or
#: more, README "Compression rule"), ``'lz4'`` (always tried; a chunk that
#: does not shrink by 1/8 is kept raw) and None (never: sampling copies the
#: rows without decoding).
COMPRESSIONS = ("auto", "lz4", None)


def compression_mode(value: Any, what: str) -> int:
    """The core's code (``_core.COMPRESSION_*``) of a compression choice;
    ValueError naming ``what`` (a column or field) otherwise."""
    from fastreplay import _core

    if value is None or value == "none":
        return int(_core.COMPRESSION_NONE)
    if value == "auto":
        return int(_core.COMPRESSION_AUTO)
    if value == "lz4":
        return int(_core.COMPRESSION_LZ4)
    raise ValueError(f"{what}: compression must be 'auto', 'lz4' or None, "
                     f"got {value!r}")


def _check_keep_alive(num_keep_alive_refs: int) -> None:
    if num_keep_alive_refs <= 0:
        raise ValueError(
            f"num_keep_alive_refs must be > 0 but got {num_keep_alive_refs}."
        )


class ConstantChunkerOptions:
    """Chunks of exactly ``max_chunk_length`` cells (shorter when flushed)."""

    def __init__(self, max_chunk_length: int, num_keep_alive_refs: int) -> None:
        _check_keep_alive(num_keep_alive_refs)
        if max_chunk_length <= 0:
            raise ValueError(
                f"max_chunk_length must be > 0 but got {max_chunk_length}.")
        if num_keep_alive_refs < max_chunk_length:
            raise ValueError(
                f"num_keep_alive_refs ({num_keep_alive_refs}) must be >= "
                f"max_chunk_length ({max_chunk_length})."
            )
        self.max_chunk_length = int(max_chunk_length)
        self.num_keep_alive_refs = int(num_keep_alive_refs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConstantChunkerOptions) and (
            self.max_chunk_length, self.num_keep_alive_refs
        ) == (other.max_chunk_length, other.num_keep_alive_refs)

    def __hash__(self) -> int:
        return hash((self.max_chunk_length, self.num_keep_alive_refs))

    def __repr__(self) -> str:
        return (f"ConstantChunkerOptions(max_chunk_length={self.max_chunk_length}, "
                f"num_keep_alive_refs={self.num_keep_alive_refs})")


class AutoTunedChunkerOptions:
    """Chunk length tuned per column within ``[1, num_keep_alive_refs]``."""

    max_chunk_length = None

    def __init__(self, num_keep_alive_refs: int, throughput_weight: float = 1.0
                 ) -> None:
        _check_keep_alive(num_keep_alive_refs)
        if not throughput_weight >= 0:
            raise ValueError(
                f"throughput_weight must be >= 0 but got {throughput_weight}."
            )
        self.num_keep_alive_refs = int(num_keep_alive_refs)
        self.throughput_weight = float(throughput_weight)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AutoTunedChunkerOptions) and (
            self.num_keep_alive_refs == other.num_keep_alive_refs
        )

    def __hash__(self) -> int:
        return hash(self.num_keep_alive_refs)

    def __repr__(self) -> str:
        return (f"AutoTunedChunkerOptions(num_keep_alive_refs="
                f"{self.num_keep_alive_refs}, throughput_weight="
                f"{self.throughput_weight})")


ChunkerOptions = ConstantChunkerOptions | AutoTunedChunkerOptions
