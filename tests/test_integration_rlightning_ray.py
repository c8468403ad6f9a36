"""rlightning's buffers keep their ``Storage`` inside Ray actors and read it
with ``storage[np.random.choice(len(storage), n)]``: the adapter's storage
works there and travels by pickle (``ray.put`` / actor arguments)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")

from fastreplay.integrations.rlightning import Storage  # noqa: E402


def _episode(n: int, base: int) -> dict[str, object]:
    return {"obs": torch.arange(base, base + n, dtype=torch.float32)[:, None]
            .repeat(1, 4), "action": torch.arange(base, base + n)}


def test_storage_in_a_ray_actor(ray_session) -> None:  # type: ignore[no-untyped-def]
    ray = ray_session

    @ray.remote
    class Buffer:
        def __init__(self) -> None:
            self.storage = Storage(1000, "circular", "transition", None, "cpu")

        def add(self, episode: dict[str, object]) -> int:
            self.storage.add_episode(episode)
            return len(self.storage)

        def sample(self, n: int, seed: int) -> dict[str, object]:
            rng = np.random.default_rng(seed)
            return self.storage[rng.choice(len(self.storage), n)]

        def counter_total(self) -> int:
            c = self.storage.data_use_counter
            return int(c[c > 0].sum())

        def snapshot(self) -> Storage:
            return self.storage

    actor = Buffer.remote()
    assert ray.get(actor.add.remote(_episode(600, 0)), timeout=60) == 600
    assert ray.get(actor.add.remote(_episode(600, 600)), timeout=60) == 1000
    batch = ray.get(actor.sample.remote(256, 1), timeout=60)
    assert batch["obs"].shape == (256, 4) and batch["action"].dtype == torch.int64
    assert (batch["obs"][:, 0] == batch["action"].float()).all()
    assert ray.get(actor.counter_total.remote(), timeout=60) == 256
    copy = ray.get(actor.snapshot.remote(), timeout=60)  # pickled out of the actor
    assert len(copy) == 1000 and copy.data_use_counter.sum() == 256
    np.testing.assert_array_equal(copy[np.arange(3)]["action"].numpy(),
                                  [1000, 1001, 1002])  # slots 0.. after the wrap
    ray.kill(actor)


def test_storage_unpickled_from_read_only_buffers_still_counts() -> None:
    """Regression: Ray hands numpy arrays out of its object store read-only;
    the unpickled storage's use counter must still be writable."""
    import pickle

    s = Storage(10, "circular", "transition", None, "cpu")
    s.add_episode(_episode(6, 0))
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(s, protocol=5, buffer_callback=buffers.append)
    frozen = [memoryview(b.raw()).toreadonly() for b in buffers]
    copy = pickle.loads(data, buffers=frozen)
    assert copy[np.array([1, 1])]["action"].tolist() == [1, 1]
    assert copy.data_use_counter[:3].tolist() == [0, 2, 0]
    assert s.data_use_counter[1] == 0
