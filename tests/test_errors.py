"""Status codes and their exceptions (issue 11, part 6).

One translator maps every status of the core to one exception (reverb-spec
section 5.6, plus fastreplay's errors which also inherit the builtin a Reverb
user catches).  Distinct failures have distinct codes, so a duplicate key is
not reported as a priority problem, a sample timeout is not called an
insert, a constructor reports its real cause, and an insert that fails after
the writer queued it is raised by that writer's next call.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from fastreplay import Server, Table, TrajectoryWriter, _core, errors
from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.replay_buffer import ReplayBuffer

SAMPLE_TIMEOUT = ("Rate Limiter: Timeout exceeded before the right to sample "
                  "was acquired.")
INSERT_TIMEOUT = ("Rate Limiter: Timeout exceeded before the right to insert "
                  "was acquired.")


def uniform(name: str = "t", max_size: int = 100) -> Table:
    return Table(name, sel.Uniform(), sel.Fifo(), max_size, rl.MinSize(1), seed=3)


# ----- the translator -----


def test_every_status_has_one_message_and_one_exception() -> None:
    assert set(_core._DEFAULT_MESSAGES) == set(_core._EXCEPTIONS)
    # Distinct texts for distinct codes.
    texts = list(_core._DEFAULT_MESSAGES.values())
    assert len(set(texts)) == len(texts)


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_is_a_reverb_error(name: str) -> None:
    assert issubclass(getattr(errors, name), errors.ReverbError)


@pytest.mark.parametrize("cls, builtin", [
    (errors.InvalidArgumentError, ValueError),
    (errors.InvalidPriorityError, ValueError),
    (errors.DeadlineExceededError, TimeoutError),
    (errors.TableClosedError, RuntimeError),
    (errors.FailedPreconditionError, RuntimeError),
    (errors.DataLossError, RuntimeError),
    (errors.InternalError, RuntimeError),
])
def test_errors_inherit_the_builtin_reverb_users_catch(cls: type,
                                                      builtin: type) -> None:
    assert issubclass(cls, builtin)


# ----- distinct codes -----


def test_priority_too_large_says_so() -> None:
    table = Table("p", sel.Prioritized(1.0), sel.Fifo(), 10, rl.MinSize(1))
    with pytest.raises(errors.InvalidPriorityError, match="too large.*table 'p'"):
        table.insert(1, 1e300)
    assert len(table) == 0


def test_restoring_a_duplicate_key_is_not_a_priority_error() -> None:
    table = uniform()
    _core.restore_item(table._core, 7, 1.0, 0, None, {})
    with pytest.raises(errors.InvalidArgumentError) as info:
        _core.restore_item(table._core, 7, 1.0, 0, None, {})
    assert not isinstance(info.value, errors.InvalidPriorityError)
    assert "already in the table" in str(info.value)
    assert "Priority" not in str(info.value)
    assert "table 't'" in str(info.value)
    assert len(table) == 1


def test_restoring_into_a_full_table_says_it_is_full() -> None:
    table = uniform(max_size=1)
    _core.restore_item(table._core, 1, 1.0, 0, None, {})
    with pytest.raises(errors.InvalidArgumentError, match="full.*max_size") as info:
        _core.restore_item(table._core, 2, 1.0, 0, None, {})
    assert not isinstance(info.value, errors.InvalidPriorityError)


# ----- constructors report their real cause -----


def test_table_core_with_an_unknown_selector_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="selector kind.*table 'x'"):
        _core.TableCore("x", 99, 1.0, 0, 1.0, 10, 0, 1.0, 1, 0.0, 1.0, 1)


@pytest.mark.parametrize("spi, min_diff, max_diff", [
    (float("nan"), 0.0, 1.0),
    (float("inf"), 0.0, 1.0),
    (0.0, 0.0, 1.0),
    (1.0, float("nan"), float("nan")),
    (1.0, 2.0, 1.0),
])
def test_table_core_refuses_a_limiter_that_would_block_forever(
        spi: float, min_diff: float, max_diff: float) -> None:
    with pytest.raises(ValueError, match="table 'x'"):
        _core.TableCore("x", 0, 1.0, 0, 1.0, 10, 0, spi, 1, min_diff, max_diff, 1)


def test_writer_core_with_bad_options_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        _core.WriterCore(_core.ChunkStore(), 1, 0)


# ----- timeouts say what timed out -----


def test_sample_timeout_says_sample_and_names_the_table() -> None:
    table = uniform("empty")
    with pytest.raises(errors.DeadlineExceededError) as info:
        table.sample(1, timeout=0.01)
    assert str(info.value) == f"{SAMPLE_TIMEOUT} (table 'empty')"


def test_sample_batch_timeout_says_sample() -> None:
    server = Server([uniform("empty")])
    try:
        with pytest.raises(errors.DeadlineExceededError,
                           match="right to sample") as info:
            server.localhost_client().sample_batch("empty", 4, timeout=0.01)
        assert "table 'empty'" in str(info.value)
    finally:
        server.stop()


def test_replay_buffer_sample_timeout_says_sample() -> None:
    with pytest.raises(errors.DeadlineExceededError, match="right to sample"):
        ReplayBuffer(4).sample(2, timeout=0.01)


def test_insert_timeout_keeps_reverbs_insert_text() -> None:
    table = Table.queue("q", 1)
    table.insert(1, 1.0)
    with pytest.raises(errors.DeadlineExceededError) as info:
        table.insert(2, 1.0, timeout=0.01)
    assert str(info.value).startswith(INSERT_TIMEOUT)
    assert "table 'q'" in str(info.value)


# ----- failures after the writer queued an item -----


def test_item_dropped_by_a_closed_table_fails_the_next_flush_once() -> None:
    table = Table.queue("q", 1)
    other = uniform("other")
    writer = TrajectoryWriter({"q": table, "other": other}, 2)
    writer.append({"x": 1})
    for _ in range(2):  # the second waits for the queue's rate limiter
        writer.create_item("q", 1.0, {"x": writer.history["x"][-1:]})
    writer.flush(block_until_num_items=1)
    table.close()
    with pytest.raises(errors.TableClosedError,
                       match="Table 'q' was closed before item"):
        writer.flush(timeout_ms=20_000)
    # Reported once; the writer goes on with its other tables.
    writer.append({"x": 2})
    writer.create_item("other", 1.0, {"x": writer.history["x"][-1:]})
    writer.flush(timeout_ms=20_000)
    assert len(other) == 1


def test_item_refused_on_its_way_fails_the_next_create_item() -> None:
    table = uniform("closed")
    other = uniform("other")
    writer = TrajectoryWriter({"closed": table, "other": other}, 2)
    writer.configure(("x",), num_keep_alive_refs=2, max_chunk_length=1)
    writer.append({"x": 1})  # its chunk is final: items go out at once
    table.close()
    writer.create_item("closed", 1.0, {"x": writer.history["x"][-1:]})
    with pytest.raises(errors.TableClosedError, match="'closed'"):
        writer.create_item("other", 1.0, {"x": writer.history["x"][-1:]})
    writer.create_item("other", 1.0, {"x": writer.history["x"][-1:]})
    writer.flush(timeout_ms=20_000)
    assert len(other) == 1


def test_item_dropped_by_a_closed_table_fails_end_episode() -> None:
    table = uniform("closed")
    writer = TrajectoryWriter(table, 2)
    writer.configure(("x",), num_keep_alive_refs=2, max_chunk_length=1)
    writer.append({"x": 1})
    table.close()
    writer.create_item("closed", 1.0, {"x": writer.history["x"][-1:]})
    with pytest.raises(errors.TableClosedError, match="'closed'"):
        writer.end_episode(timeout_ms=20_000)
    writer.end_episode(timeout_ms=20_000)
    assert writer.episode_steps == 0


OOM_CHILD = textwrap.dedent("""
    import re, resource, sys
    import numpy as np
    from fastreplay import Table, TrajectoryWriter, errors
    from fastreplay import rate_limiters as rl, selectors as sel

    # Fill the table's slot arrays exactly (they double from 1024), so the
    # next insert must grow them, then cap the address space below that.
    n = 1 << 20
    table = Table("big", sel.Uniform(), sel.Fifo(), 1 << 24, rl.MinSize(1))
    table.insert_batch(np.arange(n, dtype=np.uint64), np.ones(n))
    writer = TrajectoryWriter(table, 2)
    writer.append({"x": np.int32(1)})
    size = [l for l in open("/proc/self/status") if l.startswith("VmSize")][0]
    vm = int(re.findall(r"\\d+", size)[0]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (24 << 20), vm + (24 << 20)))
    # The item goes to the table's queue at once; inserting it needs the
    # slot arrays to double, which the cap refuses.
    writer.create_item("big", 1.0, {"x": writer.history["x"][-1:]})
    try:
        writer.flush(timeout_ms=10_000)
    except MemoryError as exc:
        print("MemoryError:", exc)
    except errors.DeadlineExceededError:
        print("flush timed out")
    else:
        print("no error")
    assert len(table) == n
""")


def test_insert_failing_in_the_tables_queue_is_raised_by_flush() -> None:
    result = subprocess.run([sys.executable, "-c", OOM_CHILD], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("MemoryError: Item "), result.stdout
    assert "table 'big'" in result.stdout
