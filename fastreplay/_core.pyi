from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

SELECTOR_KINDS: dict[str, int]
RATE_LIMITER_TIMEOUT_MESSAGE: str

def priority_weight(priority: float, exponent: float) -> float: ...
@disjoint_base
class SumTree:
    def __init__(self, capacity: int) -> None: ...
    @property
    def capacity(self) -> int: ...
    @property
    def total(self) -> float: ...
    def reserve(self, capacity: int) -> None: ...
    def clear(self) -> None: ...
    def set(self, i: int, weight: float) -> None: ...
    def get(self, i: int) -> float: ...
    def find(self, u: float) -> int: ...
    def find_many(self, u: npt.ArrayLike) -> npt.NDArray[np.int64]: ...

@disjoint_base
class TableCore:
    @property
    def name(self) -> str: ...
    def __init__(
        self,
        name: str,
        sampler_kind: int,
        sampler_exponent: float,
        remover_kind: int,
        remover_exponent: float,
        max_size: int,
        max_times_sampled: int,
        samples_per_insert: float,
        min_size_to_sample: int,
        min_diff: float,
        max_diff: float,
        seed: int,
    ) -> None: ...
    def insert(
        self,
        key: int,
        priority: float,
        payload: int = 0,
        timeout: float | None = None,
    ) -> None: ...
    def insert_many(
        self,
        keys: npt.ArrayLike,
        priorities: npt.ArrayLike,
        payloads: npt.ArrayLike | None = None,
        timeout: float | None = None,
    ) -> int: ...
    def sample(
        self, n: int, timeout: float | None = None
    ) -> tuple[
        npt.NDArray[np.uint64],
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
        npt.NDArray[np.int64],
        npt.NDArray[np.int64],
        npt.NDArray[np.uint64],
    ]: ...
    def mutate(
        self,
        update_keys: npt.ArrayLike,
        update_priorities: npt.ArrayLike,
        delete_keys: npt.ArrayLike,
    ) -> None: ...
    def reset(self) -> None: ...
    def close(self) -> None: ...
    def can_sample(self, n: int) -> bool: ...
    def can_insert(self, n: int) -> bool: ...
    def size(self) -> int: ...
    def stats(self) -> dict[str, int]: ...
    def get(self, key: int) -> tuple[int, float, int, int, int] | None: ...
    def items(self) -> npt.NDArray[Any]: ...
