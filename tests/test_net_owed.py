"""A thread that sampled ahead and then only updates priorities (a learner
that moved to a ``dataset``, or one re-prioritising what it sampled) keeps
its connection moving: the replies it is owed are read before more updates
go out (``RemoteBackend._ship_ops_unread``).

Before that, the server blocked sending the thread a batch asked ahead
(nobody read it), so it stopped reading; the updates the Flusher (or a full
MAX_KEYS) sent filled the other direction, and both sides waited forever
(session 19, found with a sharded learner switching to ``dataset``).  Each
case runs in a child process with a bounded wait, so a deadlock fails the
test instead of hanging the run.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = r"""
import sys, time
import numpy as np
import fastreplay as reverb
from fastreplay.net import priorities
from fastreplay.net.remote import RemoteBackend

mode = sys.argv[1]
if mode == "max_keys":
    priorities.MAX_DELAY = 3600.0  # no Flusher: full MAX_KEYS sends them
table = reverb.Table("t", reverb.selectors.Prioritized(1.0), reverb.selectors.Fifo(),
                     4096, reverb.rate_limiters.MinSize(1), seed=1)
server = reverb.Server([table])
writer = reverb.Client(f"localhost:{server.port}").trajectory_writer(1)
for i in range(600):  # 2 KiB a step: a batch of 256 is ~0.5 MB, inline
    writer.append({"obs": np.full(512, i, np.float32)})
    writer.create_item("t", 1.0, {"obs": writer.history["obs"][-1]})
writer.close()
backend = RemoteBackend("127.0.0.1", server.port)
for _ in range(4):  # a streak: the next batches are asked for ahead
    info = backend.sample_batch("t", 256, None)[0]
keys = np.asarray(info.key, np.uint64)
if mode == "max_keys":
    keys = np.tile(keys, 4096 // len(keys) + 1)[:4096]  # MAX_KEYS in 4 calls
deadline = time.monotonic() + 1.5
n = 0
while time.monotonic() < deadline:
    n += 1
    backend.update_priorities("t", keys, np.full(len(keys), float(n % 7 + 1)))
    time.sleep(0.0005)
backend.settle()
want = float(n % 7 + 1)
got = {float(p) for k, p in zip(table.items()["key"], table.items()["priority"])
       if k in set(keys.tolist())}
assert got == {want}, (got, want)
print("ok", n, flush=True)
backend.close()
server.stop()
"""


@pytest.mark.parametrize("mode", ["flusher", "max_keys"])
def test_updates_after_sampling_ahead_never_deadlock(mode: str) -> None:
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True,
                              text=True, timeout=30)
    except subprocess.TimeoutExpired:  # run() killed the child it started
        pytest.fail(f"{mode}: updates after batches asked ahead deadlocked")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok"), done.stdout
