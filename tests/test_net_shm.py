"""Large batches from a server of another process on this host come through
shared memory (fastreplay/net/sampling.py, csrc/shm.c): same data as over the
socket, batches a caller keeps are never overwritten, nothing is left in
/dev/shm, and a segment the server can't map falls back to the socket."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastreplay
from fastreplay import _core, errors

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"),
                                reason="needs POSIX shared memory")

SERVER = textwrap.dedent("""
    import sys
    import numpy as np
    import fastreplay as reverb
    table = reverb.Table("t", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 1000,
                         reverb.rate_limiters.MinSize(1))
    server = reverb.Server([table])
    client = reverb.Client(f"localhost:{server.port}")
    with client.trajectory_writer(1) as w:
        for i in range(64):  # 64 KiB rows: a batch of 32 is 2 MiB
            w.append({"obs": np.full((256, 256), i, np.uint8), "i": i})
            w.create_item("t", 1.0, {"obs": w.history["obs"][-1],
                                     "i": w.history["i"][-1]})
    print("PORT", server.port, flush=True)
    sys.stdin.read()  # serve until the test closes stdin
""")


@pytest.fixture(scope="module")
def address():
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # bounded: the child prints or dies
        assert line.startswith("PORT"), line
        yield f"localhost:{line.split()[1]}"
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()


def _leftovers() -> set[str]:
    mine = f"fastreplay-{os.getpid()}-"
    return {n for n in os.listdir("/dev/shm") if n.startswith(mine)}


def test_large_batches_come_through_shared_memory_and_match(address) -> None:
    with fastreplay.Client(address) as client:
        first = client.sample_batch("t", 32)  # sizes the batch: over the socket
        info, data = client.sample_batch("t", 32)
        assert not data["obs"].flags.writeable  # a view of the segment
        assert data["obs"].shape == (32, 256, 256)
        # Fifo sampler: items in insertion order; each row holds its index.
        assert (data["obs"][:, 0, 0] == data["i"]).all()
        assert (data["obs"] == data["i"][:, None, None]).all()
        assert first[1]["obs"].flags.writeable  # the socket's copy
        assert _leftovers() == set()


def test_kept_batches_are_never_overwritten(address) -> None:
    with fastreplay.Client(address) as client:
        client.sample_batch("t", 32)
        kept = [client.sample_batch("t", 32) for _ in range(6)]
        copies = [(i.key.copy(), d["obs"].copy()) for i, d in kept]
        for _ in range(10):
            client.sample_batch("t", 32)
        for (info, data), (keys, obs) in zip(kept, copies, strict=True):
            assert (info.key == keys).all()
            assert (data["obs"] == obs).all()


def test_same_batches_without_shared_memory(address, monkeypatch) -> None:
    monkeypatch.setenv("FASTREPLAY_SHM", "0")
    with fastreplay.Client(address) as client:
        for _ in range(3):
            _, data = client.sample_batch("t", 32)
            assert data["obs"].flags.writeable
            assert (data["obs"] == data["i"][:, None, None]).all()


def test_segment_the_server_cannot_map_falls_back_to_the_socket(address) -> None:
    with fastreplay.Client(address) as client:
        with pytest.raises(errors.InternalError, match="No such file"):
            client._backend.call("shm_attach", {"name": "/fastreplay-0-gone",
                                                "size": 1 << 20})
        _, data = client.sample_batch("t", 2)  # the connection still serves
        assert data["obs"].shape == (2, 256, 256)


def test_segment_names_and_sizes_are_checked() -> None:
    with pytest.raises(OSError):
        _core.SharedSegment.attach("/../../etc/passwd", 10)
    with pytest.raises(OSError):
        _core.SharedSegment.attach("no-slash", 10)
    name = f"/fastreplay-{os.getpid()}-test-size"
    seg = _core.SharedSegment.create(name, 1 << 16)
    try:
        with pytest.raises(OSError):  # a size other than the segment's
            _core.SharedSegment.attach(name, 1 << 20)
        other = _core.SharedSegment.attach(name, 1 << 16)
        np.frombuffer(other, np.uint8)[:3] = [7, 8, 9]
        assert list(np.frombuffer(seg, np.uint8)[:3]) == [7, 8, 9]
        with pytest.raises(TypeError, match="read-only"):  # the creating side
            memoryview(seg)[0:1] = b"x"
        with pytest.raises(ValueError):
            np.frombuffer(seg, np.uint8).setflags(write=True)
    finally:
        seg.unlink()
    assert _leftovers() == set()
