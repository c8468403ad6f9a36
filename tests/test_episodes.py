"""TableInfo.num_episodes and num_deleted_episodes (Reverb's meaning).

num_episodes: distinct episodes the data of the current items comes from;
num_deleted_episodes: episodes whose last item left the table (sampled out
of a queue, evicted, deleted); reset zeroes both; a checkpoint keeps the
second and the first is recomputed from the restored items.

The first tests check num_episodes the way Acme's Reverb adder tests do
(acme/adders/reverb/test_utils.py): a queue table, episodes written through
a writer, then ``client.server_info(1)[table].num_episodes``.
"""

from __future__ import annotations

import numpy as np
import pytest

import fastreplay as reverb
from fastreplay import structured_writer as sw
from fastreplay.checkpointers import DefaultCheckpointer

TABLE = "priority_table"  # acme.adders.reverb.DEFAULT_PRIORITY_TABLE


@pytest.fixture()
def server():
    server = reverb.Server([reverb.Table.queue(TABLE, 1000)])
    yield server
    server.stop()


@pytest.fixture()
def client(server: reverb.Server) -> reverb.Client:
    return reverb.Client(f"localhost:{server.port}")


def num_episodes(client: reverb.Client) -> int:
    return client.server_info(1)[TABLE].num_episodes


def episodes(client: reverb.Client) -> tuple[int, int]:
    """``(num_episodes, num_deleted_episodes)`` of the table."""
    info = client.server_info(1)[TABLE]
    return info.num_episodes, info.num_deleted_episodes


def num_items(client: reverb.Client) -> int:
    return client.server_info(1)[TABLE].current_size


def step(t: int) -> dict[str, np.ndarray]:
    return {"observation": np.full(3, t, np.float32), "action": np.int32(t),
            "reward": np.float32(t) / 10}


@pytest.mark.parametrize("repeat_episode_times", [1, 3])
def test_trajectory_writer_episodes_like_acme_sequence_adder(
        client: reverb.Client, repeat_episode_times: int) -> None:
    # An Acme SequenceAdder-like loop: an item of the last 3 steps every
    # 2 steps, and one at the end of each episode.
    writer = client.trajectory_writer(num_keep_alive_refs=3)
    for _ in range(repeat_episode_times):
        for t in range(6):
            writer.append(step(t))
            if t >= 2 and t % 2 == 0:
                writer.create_item(TABLE, 1.0, {
                    k: writer.history[k][-3:] for k in ("observation", "action",
                                                        "reward")})
        writer.create_item(TABLE, 1.0, {k: writer.history[k][-3:]
                                        for k in ("observation", "action", "reward")})
        writer.end_episode()
    writer.close()
    assert num_episodes(client) == repeat_episode_times
    assert num_items(client) == 3 * repeat_episode_times
    info = client.server_info(1)[TABLE]
    assert info.num_deleted_episodes == 0


def test_trajectory_writer_transitions_like_acme_nstep_adder(
        client: reverb.Client) -> None:
    # One squeezed-column item per step (a transition), 4 episodes.
    with client.trajectory_writer(num_keep_alive_refs=2) as writer:
        for _ in range(4):
            for t in range(5):
                writer.append(step(t))
                if t >= 1:
                    writer.create_item(TABLE, 1.0, {
                        "observation": writer.history["observation"][-2],
                        "action": writer.history["action"][-2],
                        "next_observation": writer.history["observation"][-1]})
            writer.end_episode()
    assert num_episodes(client) == 4
    assert num_items(client) == 16


def test_structured_writer_episodes(client: reverb.Client) -> None:
    ref = sw.create_reference_step(step(0))
    config = sw.create_config(
        pattern={"obs": ref["observation"][-2:], "action": ref["action"][-1]},
        table=TABLE)
    writer = client.structured_writer([config])
    for _ in range(3):
        for t in range(4):
            writer.append(step(t))
        writer.end_episode()
    writer.flush()
    assert num_items(client) == 9
    assert num_episodes(client) == 3


def test_sampling_a_queue_deletes_episodes(client: reverb.Client) -> None:
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for _ in range(3):
            for t in range(2):
                writer.append({"x": t})
                writer.create_item(TABLE, 1.0, {"x": writer.history["x"][-1]})
            writer.end_episode()
    assert episodes(client) == (3, 0)
    # The first item of episode 0 leaves; its second item remains.
    list(client.sample(TABLE, 1, emit_timesteps=False))
    assert episodes(client) == (3, 0)
    # The rest of episode 0 and all of episode 1.
    list(client.sample(TABLE, 3, emit_timesteps=False))
    assert episodes(client) == (1, 2)
    # The total is num_episodes + num_deleted_episodes (Reverb's schema).
    client.reset(TABLE)
    assert episodes(client) == (0, 0)


def test_eviction_and_delete_count_deleted_episodes() -> None:
    table = reverb.Table("t", reverb.selectors.Uniform(), reverb.selectors.Fifo(),
                         2, reverb.rate_limiters.MinSize(1), seed=1)
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        for i in range(3):  # one episode per insert, as Reverb's insert
            client.insert(np.float32(i), {"t": 1.0})
        info = table.info
        assert (info.num_episodes, info.num_deleted_episodes) == (2, 1)
        keys = table.items()["key"].tolist()
        client.mutate_priorities("t", deletes=[keys[0]])
        info = table.info
        assert (info.num_episodes, info.num_deleted_episodes) == (1, 2)
        client.mutate_priorities("t", updates={keys[1]: 5.0})  # no change
        assert table.info.num_episodes == 1


def test_items_spanning_episodes_count_each_episode(client: reverb.Client) -> None:
    # With clear_buffers=False the history keeps earlier episodes' steps, so
    # one item may reference many episodes: more than the 16 ids the table
    # reads per page.
    with client.trajectory_writer(num_keep_alive_refs=40) as writer:
        for e in range(20):
            writer.append({"x": e})
            writer.end_episode(clear_buffers=False)
        writer.create_item(TABLE, 1.0, {"x": writer.history["x"][-20:]})
        writer.create_item(TABLE, 1.0, {"x": writer.history["x"][-2:]})
        writer.flush()
    assert episodes(client) == (20, 0)
    # The 20-episode item leaves.
    list(client.sample(TABLE, 1, emit_timesteps=False))
    assert episodes(client) == (2, 18)
    list(client.sample(TABLE, 1, emit_timesteps=False))
    assert episodes(client) == (0, 20)


def test_interleaved_episodes_in_one_item(client: reverb.Client) -> None:
    # Columns of one item from different episodes, in an order that makes
    # the same episode appear in several runs of the item's slices.
    with client.trajectory_writer(num_keep_alive_refs=4) as writer:
        writer.append({"a": 0, "b": 0})
        writer.end_episode(clear_buffers=False)
        writer.append({"a": 1, "b": 1})
        writer.create_item(TABLE, 1.0, {"a": writer.history["a"][[0, 1, 0]],
                                        "b": writer.history["b"][[1, 0, 1]]})
        writer.flush()
    assert num_episodes(client) == 2
    list(client.sample(TABLE, 1, emit_timesteps=False))
    assert episodes(client) == (0, 2)


def test_legacy_writer_and_insert_are_one_episode_each(
        client: reverb.Client) -> None:
    for _ in range(2):
        with client.writer(3) as writer:
            for t in range(4):
                writer.append([np.float32(t)])
                writer.create_item(TABLE, min(t + 1, 3), 1.0)
    client.insert([np.float32(1)], {TABLE: 1.0})
    assert num_items(client) == 9
    assert num_episodes(client) == 3


def test_items_without_data_have_no_episode() -> None:
    table = reverb.Table("t", reverb.selectors.Fifo(), reverb.selectors.Fifo(),
                         10, reverb.rate_limiters.MinSize(1))
    table.insert_batch([1, 2, 3], [1.0, 1.0, 1.0])
    table.sample(1)
    info = table.info
    assert (info.num_episodes, info.num_deleted_episodes) == (0, 0)


def test_checkpoint_keeps_episode_counts(tmp_path) -> None:
    def make() -> reverb.Server:
        return reverb.Server([reverb.Table.queue(TABLE, 100)],
                             checkpointer=DefaultCheckpointer(str(tmp_path)))

    server = make()
    client = server.localhost_client()
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for _ in range(4):
            writer.append({"x": 1})
            writer.create_item(TABLE, 1.0, {"x": writer.history["x"][-1]})
            writer.end_episode()
    list(client.sample(TABLE, 1, emit_timesteps=False))
    before = client.server_info(1)[TABLE]
    assert (before.num_episodes, before.num_deleted_episodes) == (3, 1)
    client.checkpoint()
    server.stop()

    restored = make()
    client = restored.localhost_client()
    assert episodes(client) == (3, 1)
    # The restored items still count.
    list(client.sample(TABLE, 3, emit_timesteps=False))
    assert episodes(client) == (0, 4)
    restored.stop()
