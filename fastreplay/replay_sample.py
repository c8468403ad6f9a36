"""Sample records: Reverb's ``SampleInfo`` and ``ReplaySample``, plus the
batched ``SampleInfoBatch`` returned by fastreplay's vectorised sampling."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["ReplaySample", "SampleInfo", "SampleInfoBatch", "importance_weights"]


class SampleInfo(NamedTuple):
    """Metadata of one sampled item (exactly Reverb's five fields)."""

    key: int
    probability: float
    table_size: int
    priority: float
    times_sampled: int

    @staticmethod
    def tf_dtypes() -> tuple[np.dtype[Any], ...]:
        """The dtypes Reverb gives these fields, as numpy dtypes."""
        return tuple(
            np.dtype(t) for t in (np.uint64, np.float64, np.int64, np.float64, np.int32)
        )

    @classmethod
    def zeros(cls) -> SampleInfo:
        return cls(0, 0.0, 0, 0.0, 0)


class ReplaySample(NamedTuple):
    info: Any
    data: Any


class SampleInfoBatch(NamedTuple):
    """Metadata of a batch of sampled items, one numpy array per field.

    ``times_sampled`` counts the current sample; ``table_size`` is the size
    before any deletion caused by ``max_times_sampled``.
    """

    key: npt.NDArray[np.uint64]
    probability: npt.NDArray[np.float64]
    table_size: npt.NDArray[np.int64]
    priority: npt.NDArray[np.float64]
    times_sampled: npt.NDArray[np.int64]

    def __len__(self) -> int:  # type: ignore[override, unused-ignore]
        return int(self.key.shape[0])

    def weights(self, beta: float) -> npt.NDArray[np.float64]:
        """Importance-sampling weights ``(N * P(i)) ** -beta / max_j w_j``.

        The standard correction for prioritized replay (Schaul et al. 2016):
        ``beta = 0`` gives all ones, ``beta = 1`` fully compensates.
        """
        return importance_weights(self.table_size, self.probability, beta)


def importance_weights(table_size: npt.ArrayLike, probability: npt.ArrayLike,
                       beta: float) -> npt.NDArray[np.float64]:
    """``(N * P(i)) ** -beta / max_j w_j`` of a batch (``SampleInfoBatch``
    and the sharded info of ``fastreplay.ray`` share it)."""
    if not beta >= 0:
        raise ValueError(f"beta ({beta}) must be >= 0")
    w = (np.asarray(table_size) * np.asarray(probability)) ** -float(beta)
    return np.asarray(w / w.max(), dtype=np.float64)
