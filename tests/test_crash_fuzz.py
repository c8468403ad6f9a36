"""No Python call can crash the process: every public method of the public
classes (and every function and class of ``fastreplay._core``) is called
with wrong-typed and out-of-range arguments (None, floats, huge and negative
ints, NaN, strings, wrong-shaped arrays, objects of the wrong class, closed
objects).  Exceptions are fine; a crash, a hang or a huge allocation is not.

The calls run in a child process (a crash fails the test instead of killing
pytest) under an address-space cap (a huge allocation fails there instead
of swapping), with a fixed seed and a bounded number of calls.  Every crash
found is also a regression test in ``test_crash_regressions`` below.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

CHILD_TIMEOUT = 120.0

FUZZER = r'''
import inspect, itertools, math, random, resource, sys, warnings
import numpy as np
import fastreplay
from fastreplay import _core, rate_limiters as rl, selectors as sel
from fastreplay import structured_writer as sw
from fastreplay.history import ColumnHistory, TrajectoryColumn, WeakCellRef

warnings.simplefilter("ignore")
np.set_printoptions(threshold=8, edgeitems=1)
# 6 GiB above what the process maps now (relative, so a sanitizer build's
# shadow-memory reservation stays mappable).
with open("/proc/self/statm") as f:
    cap = int(f.read().split()[0]) * resource.getpagesize() + (6 << 30)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
rng = random.Random(SEED)

def table(name="t", max_size=50):
    return fastreplay.Table(name, sel.Uniform(), sel.Fifo(), max_size,
                            rl.MinSize(1), seed=1)

def writer_env():
    t = table()
    w = fastreplay.TrajectoryWriter(t, num_keep_alive_refs=4)
    for i in range(6):
        w.append({"x": np.full(3, i, np.float32), "y": np.int64(i)})
        w.create_item("t", 1.0, {"x": w.history["x"][-2:], "y": w.history["y"][-1]})
    w.flush()
    return t, w

def closed_writer():
    t, w = writer_env()
    w.close()
    return w

def closed_table():
    t = table()
    t.insert(1, 1.0)
    t.close()
    return t

def structured():
    t = table()
    step = {"a": np.zeros(2, np.float32), "b": np.int64(0)}
    cfg = sw.create_config(pattern=sw.pattern_from_transform(
        step, lambda s: {"a": s["a"][-2:]}), table="t")
    w = fastreplay.StructuredWriter(t, [cfg])
    for i in range(4):
        w.append({"a": np.full(2, i, np.float32), "b": np.int64(i)})
    return w

def vector():
    t = table()
    w = fastreplay.VectorTrajectoryWriter(t, num_envs=2, num_keep_alive_refs=3)
    w.append({"x": np.zeros((2, 3), np.float32)})
    return w

def buffer():
    b = fastreplay.ReplayBuffer(64, alpha=0.6, seed=1)
    b.add_batch(obs=np.zeros((10, 300), np.uint8), rew=np.arange(10.0))
    return b

def client():
    t = table()
    t.insert(1, 1.0)
    server = fastreplay.Server([t])
    return server.localhost_client()

def sumtree():
    s = _core.SumTree(8)
    for i in range(3):
        s.set(i, 1.0)
    return s

def history():
    return writer_env()[1].history["x"]

def column():
    return writer_env()[1].history["x"][-2:]

def cellref():
    return writer_env()[1].history["y"][-1]._refs_for_fuzz() if False else \
        WeakCellRef(writer_env()[1]._core, 0, 5)

def sampled():
    t, w = writer_env()
    return t._core.sample(1, timeout=0, with_data=True)[5][0]

def chunk_handle():
    t, w = writer_env()
    items, chunks = _core.export_items(t._core)
    return next(iter(chunks.values()))

def step_refs():
    return writer_env()[1].append({"x": np.zeros(3, np.float32), "y": np.int64(1)})

def flatten_plan():
    return _core.FlattenPlan({"a": None, "b": [None, None]},
                             {("a",): 0, ("b", 0): 1, ("b", 1): 2})

TARGETS = {
    "Table": lambda: (lambda t: (t.insert(3, 1.0), t)[1])(table()),
    "closed Table": closed_table,
    "TableCore": lambda: (lambda t: (t.insert(3, 1.0), t._core)[1])(table()),
    "closed TableCore": lambda: closed_table()._core,
    "Client": client,
    "TrajectoryWriter": lambda: writer_env()[1],
    "closed TrajectoryWriter": closed_writer,
    "WriterCore": lambda: writer_env()[1]._core,
    "closed WriterCore": lambda: closed_writer()._core,
    "StructuredWriter": structured,
    "StructuredCore": lambda: structured()._sw,
    "VectorTrajectoryWriter": vector,
    "ReplayBuffer": buffer,
    "ChunkStore": _core.ChunkStore,
    "SumTree": sumtree,
    "ColumnHistory": history,
    "TrajectoryColumn": column,
    "WeakCellRef": cellref,
    "SampledTrajectory": sampled,
    "ChunkHandle": chunk_handle,
    "StepReferences": step_refs,
    "FlattenPlan": flatten_plan,
}

def bad_values():
    t, w = writer_env()
    return [
        None, 0, 1, 2, 3, -1, -2**31, 2**31, 2**63, 2**64, -2**63 - 1, 10**30,
        0.5, -1.5, float("nan"), float("inf"), -float("inf"), True,
        "x", "", b"\x00", [], [1, 2], [[1], [2, 3]], (), {}, {"x": 1}, {"t": 1.0},
        np.zeros(0), np.zeros(3, np.float32), np.zeros((2, 2)), np.array([np.nan]),
        np.arange(4, dtype=np.uint64), np.array(["a"]),
        np.zeros((1, 2, 1, 1, 1, 1, 1, 1, 2)),
        np.int64(-1), np.float64("nan"), np.zeros(3, np.float32)[::2],
        object(), _core.ChunkStore(), t, t._core, w, w._core, closed_table()._core,
        closed_writer()._core, w.history["x"], w.history["x"][-1:],
        WeakCellRef(w._core, 0, 0), WeakCellRef(w._core, 0, 10**6),
        TrajectoryColumn([]), [w.history["x"][-1:]], lambda *a: None,
    ]

BAD = bad_values()
PLAUSIBLE = [0, 1, 2, "t", 1.0, None, np.zeros(3, np.float32), [0, 1], ("x",)]
TIMEOUT_NAMES = {"timeout", "timeout_ms"}

def params(fn):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    out = []
    for p in sig.parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out.append(p)
    return out

import time
SLOW = []
def call(label, fn, args, kwargs):
    print(label, repr(args)[:300], repr(kwargs)[:200], flush=True)
    t0 = time.perf_counter()
    try:
        _call(fn, args, kwargs)
    finally:
        if time.perf_counter() - t0 > 0.05:
            SLOW.append((time.perf_counter() - t0, label, repr(args)[:100]))

def _call(fn, args, kwargs):
    try:
        r = fn(*args, **kwargs)
        if inspect.isgenerator(r):
            list(itertools.islice(r, 5))
    except BaseException as e:
        if isinstance(e, (SystemExit, KeyboardInterrupt)):
            raise

def fuzz(label, fn, budget):
    ps = params(fn)
    if ps is None:
        for k in range(3):
            for _ in range(budget // 3):
                call(label, fn, tuple(rng.choice(BAD) for _ in range(k)), {})
        return
    n = len(ps)
    def base():
        args, kwargs = [], {}
        for p in ps:
            if p.name in TIMEOUT_NAMES:
                v = 0
            elif p.default is not p.empty:
                v = p.default
            else:
                v = rng.choice(PLAUSIBLE)
            if p.kind == p.KEYWORD_ONLY:
                kwargs[p.name] = v
            else:
                args.append(v)
        return args, kwargs
    calls = 0
    # Each bad value in each position, the others plausible ...
    for i, p in enumerate(ps):
        for v in rng.sample(BAD, min(len(BAD), max(4, budget // max(n, 1)))):
            waits = v is None or (isinstance(v, (int, float))
                                  and not (isinstance(v, float) and math.isnan(v))
                                  and v > 0)
            if p.name in TIMEOUT_NAMES and waits:
                continue  # a wait is legitimate
            args, kwargs = base()
            if p.kind == p.KEYWORD_ONLY:
                kwargs[p.name] = v
            else:
                args[i] = v
            call(label, fn, tuple(args), kwargs)
            calls += 1
    # ... then only the required ones, at random.
    req = [p for p in ps if p.default is p.empty and p.kind != p.KEYWORD_ONLY]
    for _ in range(max(0, budget - calls)):
        args = [rng.choice(BAD) if p.name not in TIMEOUT_NAMES else 0 for p in req]
        call(label, fn, tuple(args), {})

SKIP = {
    # Waits documented to block until another thread acts; fuzzed with a
    # timeout through their timeout parameter only.
    ("Client", "sample"),  # generator over endless samples (timeout=None)
    ("Client", "checkpoint"),  # writes files (tests/test_checkpoint.py)
}

for name, make in TARGETS.items():
    obj = make()
    methods = sorted(m for m in dir(obj)
                     if not m.startswith("_") or m in ("__getitem__", "__len__",
                                                      "__iter__", "__call__"))
    for m in methods:
        if (name, m) in SKIP:
            continue
        try:
            attr = getattr(make(), m)
        except BaseException:
            continue
        if not callable(attr):
            continue
        # a fresh object per call batch keeps failures independent
        for _ in range(2):
            try:
                fn = getattr(make(), m)
            except BaseException:
                break
            fuzz(f"{name}.{m}", fn, BUDGET)

CONSTRUCTORS = [fastreplay.Table, fastreplay.ReplayBuffer, fastreplay.TrajectoryWriter,
                fastreplay.StructuredWriter, fastreplay.VectorTrajectoryWriter,
                fastreplay.Server, TrajectoryColumn, rl.MinSize, rl.SampleToInsertRatio,
                rl.Queue, rl.Stack, rl.RateLimiter, sel.Prioritized, sel.MaxHeap]
for cls in CONSTRUCTORS:
    fuzz(f"{cls.__name__}()", cls, BUDGET)

for m in sorted(dir(_core)):
    f = getattr(_core, m)
    if m.startswith("__") or not callable(f) or m in ("_install_lz4", "_pool_clear",
                                                          "np", "errors"):
        continue
    fuzz(f"_core.{m}", f, BUDGET)
for s in sorted(SLOW)[-10:]:
    print("slow", s, file=sys.stderr)
print("FUZZ DONE", flush=True)
'''


def run_fuzzer(seed: int, budget: int, cwd: str) -> None:
    """Run the fuzzer in ``cwd`` (methods that write files, such as
    ReplayBuffer.save("x"), write them there)."""
    code = FUZZER.replace("SEED", str(seed)).replace("BUDGET", str(budget))
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                              text=True, timeout=CHILD_TIMEOUT, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        last = (e.stdout or b"")
        last = last.decode() if isinstance(last, bytes) else last
        pytest.fail("fuzzer hung; last call:\n" + "\n".join(last.splitlines()[-3:]))
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and lines and lines[-1] == "FUZZ DONE", (
        f"child exited with {proc.returncode}; last calls:\n"
        + "\n".join(lines[-3:]) + "\n" + proc.stderr[-3000:])


@pytest.mark.parametrize("seed", [0, 1])
def test_no_public_call_crashes(seed: int, tmp_path: Any) -> None:
    run_fuzzer(seed, 40, str(tmp_path))


def run_snippet(body: str) -> None:
    code = "import numpy as np\nimport fastreplay\nfrom fastreplay import _core\n"
    code += "from fastreplay import rate_limiters as rl, selectors as sel\n"
    code += textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-2000:]}"


def test_crash_regressions() -> None:
    """Each call here crashed the interpreter before it was fixed."""
    run_snippet("""
        import pytest
        core = _core.WriterCore(_core.ChunkStore(), 1, 2)
        for f in (lambda: core.column_info(3), lambda: core.read_cell(5, 0),
                  lambda: core.cells_at(-1, [0]), lambda: core.configure(2, 2, None),
                  lambda: core.cells_range(0, 0, 1, 2**40),
                  lambda: _core.ColumnHistory(core, 9, ("x",)),
                  lambda: _core.append_batch([object()], [], [], False),
                  lambda: _core.append_batch([core], [-1], [np.zeros((1, 3))], False)):
            with pytest.raises((IndexError, TypeError, ValueError)):
                f()
        store = _core.ChunkStore()
        for f in (lambda: _core.export_items(None),
                  lambda: _core.restore_chunk(None, {}, b""),
                  lambda: _core.restore_item(None, 1, 1.0, 0, None, {}),
                  lambda: _core.restore_counters(None, 0, 0, 0, {}),
                  lambda: _core.insert_rows(None, store, [], [], [], [], 0),
                  lambda: _core.WriterCore(None, 1, 2),
                  lambda: _core.WeakCellRef(None, 0, 0),
                  lambda: _core.ColumnHistory(None, 0, ("x",)),
                  lambda: core.create_item(None, 1.0, [])):
            with pytest.raises(TypeError):
                f()
        t = fastreplay.Table("t", sel.Uniform(), sel.Fifo(), 10, rl.MinSize(1))
        with pytest.raises(TypeError):
            t._core.insert(1, 1.0, payload=12345678)  # no payload pointer any more
        client = fastreplay.Server([t]).localhost_client()
        # hung, starting 2**64 threads
        with pytest.raises(ValueError, match="num_workers"):
            client.dataset("t", 1, num_workers=2**64, timeout=0)
        assert "payload" not in t._core.items().dtype.names
    """)


def test_items_hand_out_no_pointers() -> None:
    from fastreplay import Table, TrajectoryWriter
    from fastreplay import rate_limiters as rl
    from fastreplay import selectors as sel

    t = Table("t", sel.Uniform(), sel.Fifo(), 10, rl.MinSize(1))
    t.insert(7, 1.0)
    with TrajectoryWriter(t, 2) as w:
        w.append({"x": np.zeros(2)})
        w.create_item("t", 2.0, {"x": w.history["x"][-1]})
    items = t.items()
    assert items.dtype.names == ("key", "priority", "times_sampled",
                                 "inserted_seq", "has_data")
    assert items["has_data"].tolist() == [False, True]
    got = t._core.get(7)
    assert got is not None and got[4] is False
