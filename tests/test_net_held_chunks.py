"""The outbox's record of the chunks the server keeps for a connection
(``outbox.HeldChunks``) against a plain least-recently-used oracle: the
same chunks are sent, the same ones forgotten, never one a frame uses."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fastreplay.net import outbox

frames = st.lists(st.lists(st.integers(0, 60), max_size=12), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(frames, st.integers(1, 20), st.sets(st.integers(0, 60)))
def test_matches_a_least_recently_used_oracle(frame_keys, keep, sealed_keys):
    """Keys of ``sealed_keys`` are used as transient after their first
    frame (sealed chunks): they stop counting as kept."""
    held = outbox.HeldChunks()
    stamps: dict[int, int] = {}  # the oracle: key -> the frame that last used it
    seen: set[int] = set()
    saved = outbox.KEEP_CHUNKS
    outbox.KEEP_CHUNKS = keep
    try:
        for clock, keys in enumerate(frame_keys, 1):
            wanted = np.unique(np.asarray(keys, dtype=np.uint64))
            transient = np.array([k in sealed_keys and k in seen
                                  for k in wanted.tolist()], dtype=bool)
            seen.update(wanted.tolist())
            new, forget = held.use(wanted, transient=transient)
            assert new.tolist() == [k not in stamps for k in wanted.tolist()]
            for k, t in zip(wanted.tolist(), transient.tolist(), strict=True):
                if t:
                    stamps.pop(k, None)
                else:
                    stamps[k] = clock
            old = sorted(s for s in stamps.values() if s < clock)
            n_forget = min(max(len(stamps) - keep, 0), len(old))
            forgotten = forget.tolist()
            assert len(set(forgotten)) == len(forgotten) == n_forget
            # the least recently used go, never a key of this frame
            assert sorted(stamps[k] for k in forgotten) == old[:n_forget]
            for k in forgotten:
                del stamps[k]
            assert sorted(stamps) == held._keys.tolist()
    finally:
        outbox.KEEP_CHUNKS = saved


def test_a_frame_larger_than_the_limit_keeps_all_its_chunks():
    held = outbox.HeldChunks()
    saved = outbox.KEEP_CHUNKS
    outbox.KEEP_CHUNKS = 4
    try:
        new, forget = held.use(np.arange(10, dtype=np.uint64))
        assert new.all() and len(forget) == 0 and len(held) == 10
        new, forget = held.use(np.arange(5, 12, dtype=np.uint64))
        assert new.tolist() == [False] * 5 + [True] * 2
        assert sorted(forget.tolist()) == [0, 1, 2, 3, 4]
        assert sorted(held._keys.tolist()) == list(range(5, 12))
    finally:
        outbox.KEEP_CHUNKS = saved


def test_growing_keys_forget_the_oldest_frames_first():
    """A writer's chunk keys grow (the path that appends and slices): each
    frame's chunks are new, and the oldest frames' chunks are forgotten
    first, whole frames at a time once the limit is reached."""
    held = outbox.HeldChunks()
    saved = outbox.KEEP_CHUNKS
    outbox.KEEP_CHUNKS = 20
    try:
        for f in range(10):
            wanted = np.arange(10 * f, 10 * f + 10, dtype=np.uint64)
            new, forget = held.use(wanted)
            assert new.all()
            want_forget = list(range(10 * (f - 2), 10 * (f - 1))) if f >= 2 else []
            assert forget.tolist() == want_forget
            assert held._keys.tolist() == list(range(max(0, 10 * (f - 1)), 10 * f + 10))
        # a key kept from the older frame is used again: one of the others
        # of that frame goes (the general path: the first kept key is recent)
        new, forget = held.use(np.array([80, 100], dtype=np.uint64))
        assert new.tolist() == [False, True]
        assert len(forget) == 1 and 81 <= int(forget[0]) <= 89
    finally:
        outbox.KEEP_CHUNKS = saved


def test_frames_split_from_one_export_carry_every_chunk_they_use(monkeypatch):
    """A pass of more than FRAME_ITEMS items goes out in several frames; items
    of overlapping sequences share chunks across the frames' boundaries,
    and every item arrives whole (its chunks sent or kept by the server)."""
    import socket

    import fastreplay

    monkeypatch.setattr(outbox, "FRAME_ITEMS", 3)
    monkeypatch.setattr(outbox, "COALESCE_S", 0.05)  # many items staged a pass
    frames: list[int] = []
    ship = outbox.Outbox._ship

    def counted(self, table, records, *args):  # type: ignore[no-untyped-def]
        frames.append(len(records[0]))
        return ship(self, table, records, *args)

    monkeypatch.setattr(outbox.Outbox, "_ship", counted)
    table = fastreplay.Table("t", fastreplay.selectors.Uniform(),
                             fastreplay.selectors.Fifo(), 1000,
                             fastreplay.rate_limiters.MinSize(1))
    server = fastreplay.Server([table], port=0)
    try:
        port = server.port
        client = fastreplay.Client(  # a connector: the remote path in process
            f"127.0.0.1:{port}",
            connector=lambda t: socket.create_connection(("127.0.0.1", port), t))
        with client.trajectory_writer(4) as w:
            for i in range(40):
                w.append({"x": np.full(2, i, np.float32)})
                if i >= 3:
                    w.create_item("t", 1.0, {"x": w.history["x"][-4:]})
        client.close()
        assert server.tables["t"].size == 37
        assert sum(frames) == 37 and max(frames) <= 3 and len(frames) >= 13
        local = fastreplay.Client(f"localhost:{server.port}")
        _, data = local.sample_batch("t", 500)
        rows = np.asarray(data["x"])[:, :, 0]
        assert (np.diff(rows, axis=1) == 1).all()  # 4 consecutive steps each
        assert set(rows[:, 0].tolist()) == set(range(37))
    finally:
        server.stop()
