"""``ReplayBuffer`` persistence: ``save`` / ``load``, pickling and deepcopy,
cpprb-style ``save_transitions`` / ``load_transitions``.

Rows carry a row id ``rid`` from which every other field is derived, so a
loaded buffer can be checked row by row against what was added.
"""

from __future__ import annotations

import copy
import os
import pickle
from typing import Any

import numpy as np
import pytest

from fastreplay import ReplayBuffer
from fastreplay.errors import DataLossError


def rows(ids: Any) -> dict[str, np.ndarray]:
    rid = np.asarray(ids, dtype=np.int64)
    return {
        "rid": rid,
        "obs": (rid[:, None] * 10 + np.arange(4)).astype(np.float32),
        "action": (rid % 7).astype(np.int32),
        "reward": rid * 0.5,
    }


def check(batch: dict[str, Any]) -> np.ndarray:
    rid = batch["rid"]
    for k, v in rows(rid).items():
        np.testing.assert_array_equal(batch[k], v, err_msg=k)
    return rid


def open_bytes(path: Any) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def stored_ids(rb: ReplayBuffer) -> list[int]:
    """The row ids stored, oldest first (via save_transitions' gather)."""
    from fastreplay._rb_persist import transitions

    columns, _ = transitions(rb)
    return [int(r) for r in columns.get("rid", [])]


def filled(alpha: float | None = 0.6, n: int = 30, capacity: int = 20) -> ReplayBuffer:
    rb = ReplayBuffer(capacity, alpha=alpha, seed=1, min_size=2)
    rb.add_batch(**rows(range(n - 5)))
    for i in range(n - 5, n):
        rb.add(**{k: v[0] for k, v in rows([i]).items()})
    return rb


class TestSaveLoad:
    def test_round_trip_keeps_rows_in_order_and_config(self, tmp_path: Any) -> None:
        rb = filled(alpha=None)
        path = rb.save(tmp_path / "rb")
        assert os.path.isdir(path)
        back = ReplayBuffer.load(path, seed=3)
        assert len(back) == len(rb) == 20
        assert back.capacity == 20
        assert back.info.rate_limiter_info == rb.info.rate_limiter_info
        assert stored_ids(back) == stored_ids(rb) == list(range(10, 30))
        check(back.sample(64))

    def test_fifo_eviction_continues_after_load(self, tmp_path: Any) -> None:
        rb = filled(alpha=None)
        back = ReplayBuffer.load(rb.save(tmp_path / "rb"))
        back.add_batch(**rows([30, 31, 32]))
        back.add(**{k: v[0] for k, v in rows([33]).items()})
        assert stored_ids(back) == list(range(14, 34))
        check(back.sample(200))

    def test_priorities_and_sampling_distribution(self, tmp_path: Any) -> None:
        rb = ReplayBuffer(8, alpha=1.0, seed=0)
        rb.add_batch(**rows(range(4)), priorities=[1.0, 2.0, 3.0, 10.0])
        back = ReplayBuffer.load(rb.save(tmp_path / "rb"), seed=5)
        draws = 20000
        got = np.bincount(back.sample(draws)["rid"], minlength=4) / draws
        np.testing.assert_allclose(got, np.array([1, 2, 3, 10]) / 16, atol=0.02)
        out = back.sample(8, beta=0.5)
        assert out["weights"].dtype == np.float32
        # keys sampled before the save name the same rows after the load
        before = rb.sample(4000)
        key_of = dict(zip(before["rid"].tolist(), before["indexes"].tolist(),
                          strict=True))
        after = back.sample(4000)
        assert dict(zip(after["rid"].tolist(), after["indexes"].tolist(),
                        strict=True)) == key_of
        back.update_priorities([key_of[0], key_of[1], key_of[2], key_of[3]],
                               [10.0, 0.0, 0.0, 0.0])
        assert set(int(r) for r in back.sample(100)["rid"]) == {0}
        # PER weights after the load equal the ones before for the same rows
        w_rb = rb.sample(2000, beta=0.5)
        again = ReplayBuffer.load(rb.save(tmp_path / "rb2"), seed=9)
        w_back = again.sample(2000, beta=0.5)
        for r in range(4):
            np.testing.assert_allclose(w_rb["weights"][w_rb["rid"] == r][:1],
                                       w_back["weights"][w_back["rid"] == r][:1])

    def test_max_priority_kept(self, tmp_path: Any) -> None:
        rb = ReplayBuffer(8, alpha=1.0, seed=0)
        rb.add_batch(**rows([0]), priorities=[7.0])
        back = ReplayBuffer.load(rb.save(tmp_path / "rb"), seed=0)
        back.add(**{k: v[0] for k, v in rows([1]).items()})  # default: max priority
        got = np.bincount(back.sample(4000)["rid"], minlength=2) / 4000
        np.testing.assert_allclose(got, [0.5, 0.5], atol=0.05)

    def test_new_keys_do_not_collide(self, tmp_path: Any) -> None:
        rb = filled()
        back = ReplayBuffer.load(rb.save(tmp_path / "rb"))
        old = set(int(k) for k in back.table.items()["key"])
        back.add_batch(**rows([100, 101]))
        new = set(int(k) for k in back.table.items()["key"]) - old
        assert len(new) == 2

    def test_empty_buffer(self, tmp_path: Any) -> None:
        rb = ReplayBuffer(5, alpha=0.5, min_size=3)
        back = ReplayBuffer.load(rb.save(tmp_path / "rb"))
        assert len(back) == 0 and back.capacity == 5
        back.add_batch(**rows(range(3)))
        check(back.sample(4))

    def test_frame_streams(self, tmp_path: Any) -> None:
        rb = ReplayBuffer(16, seed=0, next_of="obs", stack_compress="obs")
        frames = np.arange(40, dtype=np.uint8)
        obs = np.stack([frames[i:i + 4] for i in range(20)])
        rb.add_batch(obs=obs[:-1], next_obs=obs[1:], t=np.arange(19))
        back = ReplayBuffer.load(rb.save(tmp_path / "rb"))
        out = back.sample(64)
        np.testing.assert_array_equal(out["obs"], obs[out["t"]])
        np.testing.assert_array_equal(out["next_obs"], obs[out["t"] + 1])
        back.add(obs=obs[19], next_obs=np.arange(20, 24, dtype=np.uint8) + 1, t=19)
        assert len(back) == 16
        with pytest.raises(ValueError, match="float32"):
            back.add(obs=obs[19].astype(np.float32), next_obs=obs[19], t=20)

    def test_declared_spec_and_nested_fields_kept(self, tmp_path: Any) -> None:
        rb = ReplayBuffer(4, spec={"obs": {"image": (np.uint8, (2, 2)),
                                           "state": (np.float32, (3,))},
                                   "reward": (np.float32, ())})
        rb.add(obs={"image": np.ones((2, 2), np.uint8), "state": [1, 2, 3]}, reward=1)
        back = ReplayBuffer.load(rb.save(tmp_path / "rb"))
        back.add(obs={"image": np.zeros((2, 2), np.uint8), "state": [0, 0, 0]},
                 reward=0.5)
        out = back.sample(16)
        assert out["obs"]["image"].shape == (16, 2, 2)
        assert out["reward"].dtype == np.float32
        assert set(out["reward"].tolist()) == {1.0, 0.5}

    def test_save_replaces_earlier_save_only(self, tmp_path: Any) -> None:
        rb = filled()
        path = rb.save(tmp_path / "rb")
        rb.add_batch(**rows([99]))
        assert rb.save(path) == path
        assert 99 in stored_ids(ReplayBuffer.load(path))
        other = tmp_path / "mine"
        other.mkdir()
        (other / "notes.txt").write_text("keep me")
        with pytest.raises(FileExistsError, match="not a saved ReplayBuffer"):
            rb.save(other)
        assert (other / "notes.txt").read_text() == "keep me"
        assert sorted(os.listdir(tmp_path)) == ["mine", "rb"]

    def test_truncated_or_corrupted_files_raise_data_loss(self, tmp_path: Any) -> None:
        rb = filled()
        for name in ("chunks.bin", "items-0.bin", "manifest.json"):
            path = rb.save(tmp_path / name)
            f = os.path.join(path, name)
            data = open_bytes(f)
            with open(f, "wb") as out:
                out.write(data[: len(data) // 2])
            with pytest.raises(DataLossError, match="corrupt or truncated"):
                ReplayBuffer.load(path)
        path = rb.save(tmp_path / "flip")
        f = os.path.join(path, "chunks.bin")
        data = bytearray(open_bytes(f))
        data[len(data) // 2] ^= 0xFF
        with open(f, "wb") as out:
            out.write(bytes(data))
        with pytest.raises(DataLossError):
            ReplayBuffer.load(path)
        with pytest.raises(DataLossError):
            ReplayBuffer.load(tmp_path / "missing")

    def test_server_checkpoint_is_not_a_buffer(self, tmp_path: Any) -> None:
        from fastreplay.checkpointers import DefaultCheckpointer

        rb = filled()
        path = DefaultCheckpointer(str(tmp_path)).save({"replay_buffer": rb.table},
                                                        rb.chunk_store)
        with pytest.raises(ValueError, match="not a saved ReplayBuffer"):
            ReplayBuffer.load(path)


class TestPickle:
    def test_pickle_round_trip(self) -> None:
        rb = filled()
        back = pickle.loads(pickle.dumps(rb))
        assert isinstance(back, ReplayBuffer)
        assert stored_ids(back) == stored_ids(rb)
        check(back.sample(32))
        back.add_batch(**rows([50]))
        assert len(back) == 20 and 50 in stored_ids(back)
        assert 50 not in stored_ids(rb)  # independent copies

    def test_deepcopy_and_empty(self) -> None:
        rb = filled(alpha=None)
        twin = copy.deepcopy(rb)
        assert stored_ids(twin) == stored_ids(rb)
        empty = pickle.loads(pickle.dumps(ReplayBuffer(3)))
        assert len(empty) == 0 and empty.capacity == 3

    def test_bad_pickle_payload(self) -> None:
        from fastreplay._rb_persist import unpickle

        with pytest.raises(DataLossError):
            unpickle("fastreplay-replay-buffer-files", 1, {"../evil": b""})
        rb = filled()
        kind, version, files = rb.__reduce__()[1]
        files = dict(files)
        files["chunks.bin"] = files["chunks.bin"][:-3]
        with pytest.raises(DataLossError):
            unpickle(kind, version, files)


class TestTransitions:
    def test_round_trip_in_order_with_priorities(self, tmp_path: Any) -> None:
        rb = filled()
        f = tmp_path / "t.npz"
        rb.save_transitions(f)
        with np.load(f) as z:  # plain arrays, no pickle
            np.testing.assert_array_equal(z["rid"], np.arange(10, 30))
            assert z["__priorities__"].shape == (20,)
        other = ReplayBuffer(50, alpha=0.6)
        other.add_batch(**rows([0]))
        other.load_transitions(f)
        assert stored_ids(other) == [0] + list(range(10, 30))
        check(other.sample(40))

    def test_priorities_carried(self, tmp_path: Any) -> None:
        rb = ReplayBuffer(8, alpha=1.0)
        rb.add_batch(**rows(range(2)), priorities=[0.0, 5.0])
        rb.save_transitions(tmp_path / "t.npz")
        other = ReplayBuffer(8, alpha=1.0)
        other.load_transitions(tmp_path / "t.npz")
        assert set(int(r) for r in other.sample(50)["rid"]) == {1}

    def test_empty_buffer_and_frames(self, tmp_path: Any) -> None:
        ReplayBuffer(3).save_transitions(tmp_path / "e.npz")
        rb = ReplayBuffer(3)
        rb.load_transitions(tmp_path / "e.npz")
        assert len(rb) == 0
        fr = ReplayBuffer(8, next_of="obs")
        obs = np.arange(10, dtype=np.float32)[:, None]
        fr.add_batch(obs=obs[:-1], next_obs=obs[1:])
        fr.save_transitions(tmp_path / "f.npz")
        with np.load(tmp_path / "f.npz") as z:
            np.testing.assert_array_equal(z["obs"], obs[1:-1])
            np.testing.assert_array_equal(z["next_obs"], obs[2:])

    def test_nested_fields_come_back_nested(self, tmp_path: Any) -> None:
        rb = ReplayBuffer(8)
        rb.add_batch(obs={"image": np.arange(6).reshape(3, 2), "state": np.arange(3)},
                     r=np.arange(3.0))
        rb.save_transitions(tmp_path / "n.npz")
        with np.load(tmp_path / "n.npz") as z:
            assert sorted(z.files) == ["__fastreplay_transitions__", "obs/image",
                                       "obs/state", "r"]
        for other in (ReplayBuffer(8), rb):
            other.load_transitions(tmp_path / "n.npz")
            out = other.sample(8)
            np.testing.assert_array_equal(out["obs"]["state"], out["r"].astype(int))
        assert len(rb) == 6

    def test_cpprb_file_needs_allow_pickle(self, tmp_path: Any) -> None:
        f = tmp_path / "cpprb.npz"
        # the layout cpprb 11's save_transitions writes (safe=True)
        data = {"obs": np.arange(6, dtype=np.float32).reshape(3, 2),
                "rew": np.array([[0.5], [1.0], [1.5]], np.float32)}
        np.savez_compressed(f, safe=True, version=1, data=data, Nstep=False,
                            cache=None, next_of=None)
        rb = ReplayBuffer(8, spec={"obs": (np.float32, (2,)), "rew": (np.float32, ())})
        with pytest.raises(ValueError, match="allow_pickle=True"):
            rb.load_transitions(f)
        rb.load_transitions(f, allow_pickle=True)
        assert len(rb) == 3
        out = rb.sample(16)
        assert out["rew"].shape == (16,)
        assert set(out["rew"].tolist()) <= {0.5, 1.0, 1.5}

    def test_bad_files(self, tmp_path: Any) -> None:
        rb = filled()
        f = tmp_path / "t.npz"
        rb.save_transitions(f)
        data = open_bytes(f)
        with open(f, "wb") as out:
            out.write(data[: len(data) // 2])
        with pytest.raises(DataLossError, match="unreadable transitions file"):
            ReplayBuffer(8).load_transitions(f)
        np.savez(tmp_path / "other.npz", x=np.zeros(3))
        with pytest.raises(ValueError, match="not a file of save_transitions"):
            ReplayBuffer(8).load_transitions(tmp_path / "other.npz")
        bad = ReplayBuffer(8)
        bad.add(rid=1, obs=np.zeros(4, np.float32), action=np.int32(0), reward=0.5,
                extra=1)
        rb.save_transitions(tmp_path / "good.npz")
        with pytest.raises(ValueError, match="missing field"):
            bad.load_transitions(tmp_path / "good.npz")
