"""Tables described as text: ``fastreplay serve --table`` and ``--config``.

A table spec is comma-separated ``key=value`` pairs, for example
``name=replay,sampler=prioritized:0.6,remover=fifo,max_size=1000000,
rate_limiter=min_size:1000``; a config file gives the same keys as a JSON
object.  Keys:

- ``name`` (required): the table name;
- ``sampler``, ``remover``: ``uniform``, ``fifo``, ``lifo``,
  ``prioritized:EXPONENT``, ``heap:min`` or ``heap:max`` (defaults
  ``uniform`` and ``fifo``);
- ``max_size``: items, > 0 (default 1000000);
- ``max_times_sampled``: items are deleted after this many samples, 0 means
  unlimited (default 0);
- ``rate_limiter``: ``min_size:N``, ``sample_to_insert_ratio:R:MIN:TOL``
  (samples per insert, min size to sample, error buffer), ``queue:N`` or
  ``stack:N`` (default ``min_size:1``).  ``queue:N`` and ``stack:N`` make a
  Reverb queue or stack: unless given, the sampler and remover default to
  fifo (lifo for a stack), ``max_times_sampled`` to 1 and ``max_size`` to N;
- ``seed``: the table's sampling seed, an integer >= 0 (default random);
- ``compression``: the default compression of the columns its items come
  from, ``auto``, ``lz4`` or ``none`` (default ``auto``).

Signatures cannot be given here.  Every bad key or value raises
:class:`SpecError` naming the key and the value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from fastreplay import rate_limiters as rl
from fastreplay import selectors as sel
from fastreplay.reverb_types import KeyDistributionOptions, RateLimiterInfo
from fastreplay.table import Table

__all__ = ["KEYS", "SpecError", "TableSpec", "describe_rate_limiter",
           "describe_selector", "parse_table_spec", "table_spec_from_json"]

KEYS = ("name", "sampler", "remover", "max_size", "max_times_sampled",
        "rate_limiter", "seed", "compression")
SELECTORS = "uniform, fifo, lifo, prioritized:EXPONENT, heap:min, heap:max"
RATE_LIMITERS = ("min_size:N, sample_to_insert_ratio:R:MIN:TOL, queue:N, "
                 "stack:N")


class SpecError(ValueError):
    """A table spec or config with a bad key or value."""


def _bad(key: str, value: str, why: str) -> SpecError:
    return SpecError(f"{key}={value!r}: {why}")


def _int(key: str, text: str, minimum: int, what: str = "",
         whole: str | None = None) -> int:
    """``text`` as an int >= minimum; the error names ``key=whole`` and,
    for a part of a value, ``what`` that part is."""
    part = f"{what} must be" if what else "must be"
    got = f", got {text!r}" if what else ""
    try:
        value = int(text, 10)
    except ValueError:
        raise _bad(key, whole or text, f"{part} an integer{got}") from None
    if value < minimum:
        raise _bad(key, whole or text, f"{part} >= {minimum}{got}")
    return value


def _float(key: str, what: str, value: str, text: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise _bad(key, text, f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise _bad(key, text, f"{what} must be finite, got {value!r}")
    return x


def _args(key: str, text: str, kind: str, names: tuple[str, ...]) -> list[str]:
    parts = text.split(":")[1:]
    if len(parts) != len(names) or not all(p.strip() for p in parts):
        if not names:
            raise _bad(key, text, f"{kind} takes no value")
        raise _bad(key, text, f"expected {kind}:{':'.join(names)}")
    return [p.strip() for p in parts]


def make_selector(key: str, text: str) -> sel.ItemSelector:
    """A fresh selector from ``text`` (``uniform``, ``prioritized:0.6``, ...)."""
    kind = text.split(":", 1)[0].strip().lower()
    simple: dict[str, type[sel.ItemSelector]] = {
        "uniform": sel.Uniform, "fifo": sel.Fifo, "lifo": sel.Lifo,
        "min_heap": sel.MinHeap, "max_heap": sel.MaxHeap}
    if kind in simple:
        _args(key, text, kind, ())
        return simple[kind]()
    if kind == "prioritized":
        (exponent,) = _args(key, text, kind, ("EXPONENT",))
        x = _float(key, "the priority exponent", exponent, text)
        try:
            return sel.Prioritized(x)
        except ValueError as exc:
            raise _bad(key, text, str(exc)) from None
    if kind == "heap":
        (which,) = _args(key, text, kind, ("min|max",))
        if which.lower() not in ("min", "max"):
            raise _bad(key, text, f"heap takes min or max, got {which!r}")
        return sel.MinHeap() if which.lower() == "min" else sel.MaxHeap()
    raise _bad(key, text, f"unknown selector {kind!r}; choose from {SELECTORS}")


def make_rate_limiter(text: str) -> rl.RateLimiter:
    """A fresh rate limiter from ``text`` (``min_size:1000``, ...)."""
    key = "rate_limiter"
    kind = text.split(":", 1)[0].strip().lower()
    try:
        if kind == "min_size":
            (n,) = _args(key, text, kind, ("N",))
            return rl.MinSize(_int(key, n, 1, "N", text))
        if kind in ("queue", "stack"):
            (n,) = _args(key, text, kind, ("N",))
            size = _int(key, n, 1, "N", text)
            return rl.Queue(size) if kind == "queue" else rl.Stack(size)
        if kind == "sample_to_insert_ratio":
            r, m, tol = _args(key, text, kind, ("R", "MIN", "TOL"))
            return rl.SampleToInsertRatio(
                _float(key, "R (samples per insert)", r, text),
                _int(key, m, 1, "MIN (min size to sample)", text),
                _float(key, "TOL (error buffer)", tol, text))
    except SpecError:
        raise
    except (ValueError, TypeError) as exc:
        raise _bad(key, text, str(exc)) from None
    raise _bad(key, text, f"unknown rate limiter {kind!r}; choose from "
                          f"{RATE_LIMITERS}")


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """A checked table description; :meth:`build` makes the Table."""

    name: str
    sampler: str = "uniform"
    remover: str = "fifo"
    max_size: int = 1_000_000
    max_times_sampled: int = 0
    rate_limiter: str = "min_size:1"
    seed: int | None = None
    compression: str | None = "auto"

    def build(self) -> Table:
        """A new, empty Table (fresh selector and rate-limiter objects)."""
        return Table(self.name, make_selector("sampler", self.sampler),
                     make_selector("remover", self.remover), self.max_size,
                     make_rate_limiter(self.rate_limiter),
                     max_times_sampled=self.max_times_sampled, seed=self.seed,
                     compression=self.compression)


def _from_pairs(pairs: list[tuple[str, str]]) -> TableSpec:
    given: dict[str, str] = {}
    for key, value in pairs:
        if key not in KEYS:
            hint = " (signatures cannot be given on the command line)" \
                if key == "signature" else ""
            raise SpecError(f"unknown key {key!r}{hint}; keys are "
                            f"{', '.join(KEYS)}")
        if key in given:
            raise SpecError(f"key {key!r} given twice ({given[key]!r} and "
                            f"{value!r})")
        if not value:
            raise SpecError(f"{key}: empty value")
        given[key] = value
    if "name" not in given:
        raise SpecError("missing key 'name' (e.g. name=replay)")
    make_selector("sampler", given.get("sampler", "uniform"))
    make_selector("remover", given.get("remover", "fifo"))
    limiter = make_rate_limiter(given.get("rate_limiter", "min_size:1"))
    fields: dict[str, object] = {"name": given["name"]}
    kind = given.get("rate_limiter", "").split(":", 1)[0].strip().lower()
    if kind in ("queue", "stack"):
        order = "fifo" if kind == "queue" else "lifo"
        fields.update(sampler=order, remover=order, max_times_sampled=1,
                      max_size=int(limiter.max_diff))
    for key in ("sampler", "remover", "rate_limiter"):
        if key in given:
            fields[key] = given[key]
    if "max_size" in given:
        fields["max_size"] = _int("max_size", given["max_size"], 1)
    if "max_times_sampled" in given:
        fields["max_times_sampled"] = _int(
            "max_times_sampled", given["max_times_sampled"], 0)
    if "seed" in given:
        fields["seed"] = _int("seed", given["seed"], 0)
    if "compression" in given:
        text = given["compression"].lower()
        if text not in ("auto", "lz4", "none"):
            raise _bad("compression", given["compression"],
                       "must be auto, lz4 or none")
        fields["compression"] = None if text == "none" else text
    return TableSpec(**fields)  # type: ignore[arg-type]


def parse_table_spec(text: str) -> TableSpec:
    """``name=replay,sampler=prioritized:0.6,...`` as a TableSpec."""
    pairs = []
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise SpecError(f"{part.strip()!r} is not key=value (e.g. "
                            "name=replay,max_size=1000)")
        pairs.append((key.strip().lower(), value.strip()))
    return _from_pairs(pairs)


def table_spec_from_json(entry: object) -> TableSpec:
    """A config file's table: an object with the spec's keys (numbers as
    JSON numbers or strings) or a spec string."""
    if isinstance(entry, str):
        return parse_table_spec(entry)
    if not isinstance(entry, Mapping):
        raise SpecError(f"a table must be an object like {{\"name\": "
                        f"\"replay\"}}, got {entry!r}")
    pairs = []
    for key, value in entry.items():
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise SpecError(f"{key}: must be a string or a number, got "
                            f"{value!r}")
        if isinstance(value, float) and key in (
                "max_size", "max_times_sampled", "seed"):
            raise _bad(str(key), str(value), "must be an integer")
        pairs.append((str(key), str(value).strip()))
    return _from_pairs(pairs)


def _g(x: float) -> str:
    return "inf" if x >= 1e300 else "-inf" if x <= -1e300 else f"{x:g}"


def describe_selector(options: KeyDistributionOptions) -> str:
    """A sampler or remover in spec syntax (``prioritized:0.6``)."""
    which = options.WhichOneof("distribution")
    if which == "prioritized":
        return f"prioritized:{options.prioritized.priority_exponent:g}"
    if which == "heap":
        return "heap:min" if options.heap.min_heap else "heap:max"
    return which or "unknown"


def describe_rate_limiter(info: RateLimiterInfo, sampler: str = "") -> str:
    """A rate limiter in spec syntax where the parameters (and, for a queue
    or a stack, the ``sampler``: fifo or lifo) tell which one
    (``min_size:1000``, ``queue:10``), else its parameters."""
    if (info.samples_per_insert == 1 and info.min_diff <= -1e300
            and info.max_diff >= 1e300):
        return f"min_size:{info.min_size_to_sample}"
    queue = {"fifo": "queue", "lifo": "stack"}.get(sampler)
    if (queue and info.samples_per_insert == 1 and info.min_size_to_sample == 1
            and info.min_diff == 0 and info.max_diff >= 1
            and info.max_diff == int(info.max_diff)):
        return f"{queue}:{int(info.max_diff)}"
    return (f"samples_per_insert={_g(info.samples_per_insert)} "
            f"min_size={info.min_size_to_sample} "
            f"diff=[{_g(info.min_diff)}, {_g(info.max_diff)}]")
