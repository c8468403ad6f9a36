"""Reverb's API surface where its own tests (client_test, server_test,
structured_writer_test, trajectory_writer_test) look: TableInfo shaped like
Reverb's messages, a lazily connecting Client, the private names and the
messages and exception types those tests rely on."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
import socket
import threading
import time
from typing import Any

import numpy as np
import pytest

import fastreplay as reverb
from fastreplay import errors, reverb_types, structured_writer, trajectory_writer
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.reverb_types import KeyDistributionOptions as KDO


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SELECTORS = {
    "uniform": (sel.Uniform, "uniform", False),
    "prioritized": (lambda: sel.Prioritized(1.0), "prioritized", False),
    "min_heap": (sel.MinHeap, "heap", True),
    "max_heap": (sel.MaxHeap, "heap", True),
    "fifo": (sel.Fifo, "fifo", True),
    "lifo": (sel.Lifo, "lifo", True),
}
LIMITERS = {
    "min_size": lambda: rl.MinSize(10),
    "queue": lambda: rl.Queue(10),
    "ratio": lambda: rl.SampleToInsertRatio(1.0, 10, 1.0),
    "stack": lambda: rl.Stack(10),
}


class TestTableInfo:
    # Reverb's server_test.test_table_info: every sampler x remover x limiter.
    @pytest.mark.parametrize(("sampler", "remover", "limiter"), list(
        itertools.product(SELECTORS, SELECTORS, LIMITERS)))
    def test_fields(self, sampler: str, remover: str, limiter: str) -> None:
        table = reverb.Table("table", SELECTORS[sampler][0](),
                             SELECTORS[remover][0](), 100, LIMITERS[limiter]())
        info = table.info
        assert (info.name, info.max_size, info.current_size) == ("table", 100, 0)
        assert (info.num_episodes, info.num_deleted_episodes) == (0, 0)
        assert info.signature is None
        for options, name in ((info.sampler_options, sampler),
                              (info.remover_options, remover)):
            _, field, deterministic = SELECTORS[name]
            assert options.HasField(field)
            assert options.WhichOneof("distribution") == field
            assert [f for f in ("fifo", "uniform", "prioritized", "heap", "lifo")
                    if options.HasField(f)] == [field]
            assert options.is_deterministic is deterministic
            if field == "heap":
                assert options.heap.min_heap is (name == "min_heap")

    def test_options_read_like_protobuf(self) -> None:
        table = reverb.Table("t", sel.Prioritized(0.6), sel.Fifo(), 10,
                             rl.MinSize(1))
        sampler, remover = table.info.sampler_options, table.info.remover_options
        assert sampler.prioritized.priority_exponent == 0.6
        assert not sampler.fifo and not sampler.uniform and not sampler.lifo
        assert sampler.heap.min_heap is False  # unset member: its default
        assert remover.fifo is True
        assert remover.prioritized.priority_exponent == 0.0
        assert sampler == KDO(prioritized=KDO.Prioritized(0.6))
        assert sampler != remover and remover == KDO(fifo=True, is_deterministic=True)
        assert str(sampler) == "prioritized {\n  priority_exponent: 0.6\n}\n"
        assert str(remover) == "fifo: true\nis_deterministic: true\n"
        with pytest.raises(ValueError, match="presence"):
            sampler.HasField("is_deterministic")
        with pytest.raises(ValueError, match="no \"fiffo\" field"):
            sampler.HasField("fiffo")
        with pytest.raises(ValueError):
            sampler.WhichOneof("nope")
        with pytest.raises(ValueError, match="only one distribution"):
            KDO(fifo=True, lifo=True)
        with pytest.raises(TypeError):
            hash(sampler)  # messages are unhashable, as protobuf's

    def test_rate_limiter_info_and_worker_time(self) -> None:
        table = reverb.Table("t", sel.Fifo(), sel.Fifo(), 10,
                             rl.SampleToInsertRatio(2.0, 1, (-1.0, 5.0)))
        table.insert_batch([1, 2], [1.0, 1.0], timeout=1)
        table.sample(1, timeout=1)
        info = table.info
        rli = info.rate_limiter_info
        assert (rli.samples_per_insert, rli.min_diff, rli.max_diff,
                rli.min_size_to_sample) == (2.0, -1.0, 5.0, 1)
        assert rli.insert_stats.completed == 2 and rli.sample_stats.completed == 1
        assert rli.HasField("insert_stats") and rli.HasField("sample_stats")
        assert rli.insert_stats == reverb_types.RateLimiterCallStats(2)
        assert info.num_unique_samples == 1
        worker = info.table_worker_time
        assert (worker.running_ms, worker.sampling_ms, worker.inserting_ms,
                worker.sleeping_ms, worker.waiting_for_sampling_ms,
                worker.waiting_for_inserts_ms) == (0, 0, 0, 0, 0, 0)
        # fastreplay's counters stay.
        assert (info.num_inserts, info.num_samples, info.num_updates,
                info.num_deletes, info.num_evictions, info.num_expired) == (
                    2, 1, 0, 0, 0, 0)

    def test_reverb_field_order(self) -> None:
        names = [f.name for f in dataclasses.fields(reverb.TableInfo)]
        assert names[:12] == [
            "name", "sampler_options", "remover_options", "max_size",
            "max_times_sampled", "rate_limiter_info", "signature", "current_size",
            "num_episodes", "num_deleted_episodes", "num_unique_samples",
            "table_worker_time"]
        assert reverb.reverb_types.TableInfo is reverb.TableInfo

    def test_replace_reads_the_rate_limiter_info(self) -> None:
        # Reverb's server_test.test_replace.
        table = reverb.Table("table", sel.Fifo(), sel.Fifo(), 100, rl.MinSize(10))
        old = table.info.rate_limiter_info
        new = table.replace(rate_limiter=rl.RateLimiter(
            samples_per_insert=old.samples_per_insert, min_size_to_sample=1,
            min_diff=old.min_diff, max_diff=old.max_diff))
        assert new.info.rate_limiter_info.min_size_to_sample == 1


class TestLazyClient:
    def test_server_info_times_out(self) -> None:
        client = reverb.Client(f"localhost:{free_port()}")  # no error yet
        start = time.monotonic()
        with pytest.raises(errors.DeadlineExceededError,
                           match="ServerInfo call did not complete within "
                                 "provided timeout of 0.2s"):
            client.server_info(timeout=0.2)
        assert time.monotonic() - start >= 0.2

    def test_other_calls_fail_clearly(self) -> None:
        client = reverb.Client(f"localhost:{free_port()}")
        for call in (lambda: client.server_info(),
                     lambda: client.insert(1, {"t": 1.0}),
                     lambda: client.trajectory_writer(1),
                     lambda: client.writer(1),
                     lambda: client.sample_batch("t", 1),
                     lambda: next(client.sample("t"))):
            with pytest.raises(errors.UnavailableError, match="No fastreplay server"):
                call()
        assert issubclass(errors.UnavailableError, RuntimeError)

    def test_remote_host_fails_on_use(self) -> None:
        client = reverb.Client("example.invalid:1234")
        with pytest.raises(errors.UnavailableError,
                           match="No fastreplay server at example"):
            client.reset("t")

    def test_connects_when_the_server_starts(self) -> None:
        port = free_port()
        client = reverb.Client(f"localhost:{port}")
        with pytest.raises(errors.UnavailableError):
            client.server_info()
        result: dict[str, Any] = {}

        def wait() -> None:
            result["info"] = client.server_info(timeout=30)

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        server = reverb.Server([reverb.Table.queue("q", 3)], port=port)
        try:
            waiter.join(30)
            assert set(result["info"]) == {"q"}
            client.insert(1, {"q": 1.0})
            assert len(server.tables["q"]) == 1
        finally:
            server.stop()

    def test_malformed_address_still_raises(self) -> None:
        with pytest.raises(ValueError):
            reverb.Client("nonsense")


class TestNamesAndMessages:
    def test_private_column_history_name(self) -> None:
        assert trajectory_writer._ColumnHistory is reverb.history.ColumnHistory
        with reverb.Server([reverb.Table.queue("q", 3)]) as server:
            writer = server.localhost_client().trajectory_writer(2)
            writer.append({"x": 1})
            assert isinstance(writer.history["x"], trajectory_writer._ColumnHistory)

    def test_structured_writer_names_column_index_and_path(self) -> None:
        # Reverb's structured_writer_test messages, verbatim.
        ref = structured_writer.create_reference_step(
            {"a": np.zeros([], np.float32),
             "b": {"c": np.zeros([2, 2], np.int32),
                   "d": [np.zeros([3], np.int64), np.zeros([6], np.int64)]}})
        with reverb.Server([reverb.Table.queue("q", 10)]) as server:
            client = server.localhost_client()
            writer = client.structured_writer([structured_writer.create_config(
                ref["b"]["c"][-1], "q")])
            writer.append({"a": 1, "b": {"c": 1.0}})
            with pytest.raises(ValueError) as info:
                writer.append({"a": 2, "b": {"c": 2}})
            assert str(info.value) == ("Tensor of wrong dtype provided for column "
                                       "1 (path=('b', 'c')). Got int64 but "
                                       "expected double.")
            writer = client.structured_writer([structured_writer.create_config(
                ref["b"]["d"][1][-1], "q")])
            writer.append({"a": 1, "b": {"c": 1.0, "d": [1, 1]}})
            with pytest.raises(ValueError) as info:
                writer.append({"a": 2, "b": {"c": 2.0, "d": [
                    2, np.array([[2, 2], [2, 2]])]}})
            assert str(info.value) == (
                "Tensor of incompatible shape provided for column 3 "
                "(path=('b', 'd', 1)). Got [2,2] which is incompatible with [].")

    def test_trajectory_writer_names_the_path(self) -> None:
        # Reverb's trajectory_writer_test messages: the path only.
        with reverb.Server([reverb.Table.queue("q", 10)]) as server:
            writer = server.localhost_client().trajectory_writer(2)
            data = {"scalar": 1, "nest": {"sub": 1.0, "sub_list": [1, 2, 3]}}
            writer.append(data)
            bad = copy.deepcopy(data)
            bad["nest"]["sub_list"][1] = 2.0
            with pytest.raises(ValueError, match=re.escape(
                    "Tensor of wrong dtype provided for column "
                    "('nest', 'sub_list', 1). Got double but expected int64.")):
                writer.append(bad)

    def test_history_index_before_the_first_step_is_a_value_error(self) -> None:
        with reverb.Server([reverb.Table.queue("q", 10)]) as server:
            writer = server.localhost_client().trajectory_writer(5)
            for i in range(3):
                writer.append({"x": i})
            for index in (-4, [0, -4], 3, [3]):
                with pytest.raises(ValueError):
                    writer.history["x"][index]
                with pytest.raises(IndexError):  # fastreplay's earlier type
                    writer.history["x"][index]
            assert writer.history["x"][-3].numpy() == 0


class FakeRef:
    """A reference object as Reverb's trajectory_writer_test builds them."""

    def __init__(self, data: Any) -> None:
        self.data = data

    @property
    def shape(self) -> tuple[int, ...]:
        return np.asarray(self.data).shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.asarray(self.data).dtype

    @property
    def expired(self) -> bool:
        return False

    def numpy(self) -> Any:
        return self.data


class TestDetachedTrajectoryColumn:
    @pytest.mark.parametrize("data", [0, 1.0, True, np.zeros(()), np.zeros((3, 4, 2)),
                                      np.zeros((), np.complex64),
                                      np.zeros((), object)])
    def test_len_shape_dtype(self, data: Any) -> None:
        for n in range(1, 4):
            column = reverb.TrajectoryColumn([FakeRef(data)] * n)
            assert len(column) == n
            assert column.shape == (n, *np.asarray(data).shape)
            assert column.dtype == np.asarray(data).dtype
        squeezed = reverb.TrajectoryColumn([FakeRef(data)], squeeze=True)
        assert squeezed.shape == np.asarray(data).shape

    def test_squeeze_and_none_validation(self) -> None:
        with pytest.raises(ValueError):
            reverb.TrajectoryColumn([], squeeze=True)
        with pytest.raises(ValueError):
            reverb.TrajectoryColumn([FakeRef(1), FakeRef(2)], squeeze=True)
        with pytest.raises(ValueError, match="cannot contain any None"):
            reverb.TrajectoryColumn([FakeRef(1), None])
        with pytest.raises(TypeError):
            reverb.TrajectoryColumn([object()])

    def test_values_and_indexing(self) -> None:
        refs = [FakeRef(np.full(2, i)) for i in range(4)]
        column = reverb.TrajectoryColumn(refs)
        np.testing.assert_array_equal(column.numpy(), [[0, 0], [1, 1], [2, 2],
                                                       [3, 3]])
        assert list(column) == refs
        np.testing.assert_array_equal(column[1].numpy(), [1, 1])
        assert column[1].is_squeezed and column[1:3].shape == (2, 2)
        assert column[[3, 0]].numpy()[0, 0] == 3

    def test_cannot_be_written(self) -> None:
        with reverb.Server([reverb.Table.queue("q", 10)]) as server:
            writer = server.localhost_client().trajectory_writer(2)
            writer.append({"x": 1})
            with pytest.raises(ValueError):
                writer.create_item("q", 1.0, {"x": reverb.TrajectoryColumn(
                    [FakeRef(1)])})
            assert len(server.tables["q"]) == 0


def test_insert_with_a_bad_priority_for_a_later_table_inserts_nothing() -> None:
    # Every table's priority is checked before any item is created.
    def table(name: str) -> reverb.Table:
        return reverb.Table(
            name, sampler=sel.Prioritized(0.8),
            remover=sel.Fifo(), max_size=10,
            rate_limiter=rl.MinSize(1))

    server = reverb.Server([table("a"), table("b")])
    client = server.localhost_client()
    for bad in (float("nan"), -1.0):
        with pytest.raises(errors.InvalidPriorityError, match="table 'b'"):
            client.insert(np.zeros(3, np.float32), {"a": 1.0, "b": bad})
    info = client.server_info()
    assert info["a"].current_size == 0 and info["b"].current_size == 0
    client.insert(np.zeros(3, np.float32), {"a": 1.0, "b": 2.0})
    assert client.server_info()["a"].current_size == 1
