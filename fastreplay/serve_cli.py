"""``fastreplay serve`` and ``fastreplay stats``: a standalone server
process, and a look at a running one from any process.

``serve`` builds its tables from ``--table`` specs and/or a JSON ``--config``
(syntax in :mod:`fastreplay.table_spec`), prints one ``listening on`` line
and serves until SIGINT (Ctrl-C) or SIGTERM, optionally checkpointing before
it exits.  ``stats`` connects with ``Client('host:port')`` and prints every
table's size, counters and rate limiter, once or at an interval.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from fastreplay.table_spec import (
    KEYS,
    RATE_LIMITERS,
    SELECTORS,
    SpecError,
    TableSpec,
    describe_rate_limiter,
    describe_selector,
    parse_table_spec,
    table_spec_from_json,
)

__all__ = ["add_parsers", "load_config", "run_serve", "run_stats"]

CONFIG_KEYS = ("port", "host", "token", "tables", "checkpoint_dir",
               "checkpoint_on_exit", "stats_every")

_SERVE_EPILOG = f"""\
table spec: comma-separated key=value pairs; keys:
  {', '.join(KEYS)}
  name               the table name (required)
  sampler, remover   {SELECTORS}
                     (defaults: uniform, fifo)
  max_size           items, > 0 (default 1000000)
  max_times_sampled  delete an item after this many samples; 0 = unlimited
  rate_limiter       {RATE_LIMITERS}
                     (default min_size:1); queue:N and stack:N make a Reverb
                     queue/stack (fifo/lifo, max_times_sampled=1, max_size=N
                     unless given)
  seed               the table's sampling seed (default: random)

config file (JSON), the same settings as the options (options win; --table
adds tables); a relative checkpoint_dir is relative to the file:
  {{"port": 8000, "host": "127.0.0.1", "checkpoint_dir": "ckpt",
   "tables": [{{"name": "replay", "sampler": "prioritized:0.6",
               "max_size": 1000000, "rate_limiter": "min_size:1000"}}]}}

examples:
  fastreplay serve --port 8000 \\
      --table name=replay,sampler=prioritized:0.6,rate_limiter=min_size:1000
  fastreplay serve --config server.json --checkpoint-dir ckpt --checkpoint-on-exit
  fastreplay stats localhost:8000 --interval 1

Clients in other processes connect with fastreplay.Client('HOST:PORT').
"""


def _number(kind: type[int] | type[float], what: str,
            minimum: float = 0, strict: bool = True) -> Callable[[str], Any]:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{what} must be a{'n' if kind is int else ''} {kind.__name__}, "
                f"got {text!r}") from None
        ok = value > minimum if strict else value >= minimum
        if not ok or value != value or value == float("inf"):
            raise argparse.ArgumentTypeError(
                f"{what} must be {'>' if strict else '>='} {minimum:g} and finite, "
                f"got {text!r}")
        return value

    return parse


def _port(text: str) -> int:
    port = _number(int, "--port", 0, strict=False)(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"--port must be <= 65535, got {text!r}")
    return int(port)


def _table_arg(text: str) -> TableSpec:
    try:
        return parse_table_spec(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (in {text!r})") from None


def _address(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(
            f"the server address must be HOST:PORT (e.g. localhost:8000), "
            f"got {text!r}")
    return f"{host or 'localhost'}:{int(port)}"


def add_parsers(sub: Any) -> None:
    """Add ``serve`` and ``stats`` to the ``fastreplay`` subparsers."""
    serve = sub.add_parser(
        "serve", help="run a replay server for clients in other processes",
        description="Serve replay tables on a TCP port until Ctrl-C or SIGTERM.\n"
                    "Prints 'fastreplay serve: listening on HOST:PORT "
                    "(tables: ...)' once ready.",
        epilog=_SERVE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--port", type=_port,
                       help="TCP port; 0 picks a free one (shown in the "
                            "listening line)")
    serve.add_argument("--host",
                       help="interface to listen on (default: $FASTREPLAY_HOST, "
                            "else 127.0.0.1, loopback only); 0.0.0.0 opens it "
                            "to other machines")
    serve.add_argument("--token",
                       help="shared token clients must present (default: "
                            "$FASTREPLAY_TOKEN; prefer the variable: "
                            "arguments are visible to other users in ps)")
    serve.add_argument("--table", dest="tables", action="append", default=[],
                       type=_table_arg, metavar="SPEC",
                       help="a table: name=NAME[,KEY=VALUE...], e.g. "
                            "name=replay,sampler=prioritized:0.6 "
                            "(keys below; repeat for more tables)")
    serve.add_argument("--config", metavar="FILE.json",
                       help="read the settings and tables from a JSON file")
    serve.add_argument("--checkpoint-dir", metavar="DIR",
                       help="checkpoint directory: restore the newest "
                            "checkpoint in it at start, write there on "
                            "client.checkpoint()")
    serve.add_argument("--checkpoint-on-exit", action="store_true", default=None,
                       help="write a checkpoint to --checkpoint-dir before "
                            "exiting on Ctrl-C or SIGTERM")
    serve.add_argument("--stats-every", type=_number(float, "--stats-every"),
                       metavar="SECONDS",
                       help="print each table's size and insert/sample rates "
                            "every SECONDS")

    serve.set_defaults(subparser=serve)

    stats = sub.add_parser(
        "stats", help="sizes, counters and rates of a running server's tables",
        description="Connect to a fastreplay server (any process, any host "
                    "it accepts) and print each table's size, inserts, "
                    "samples, episodes, selectors and rate limiter. With "
                    "--interval, poll repeatedly and show insert and sample "
                    "rates between polls. Exit code 1 when the server "
                    "cannot be reached.")
    stats.add_argument("address", type=_address, metavar="HOST:PORT")
    stats.add_argument("--timeout", type=_number(float, "--timeout"), default=5.0,
                       metavar="SECONDS",
                       help="give up reaching the server after SECONDS "
                            "(default: 5)")
    stats.add_argument("--token",
                       help="the server's shared token (default: "
                            "$FASTREPLAY_TOKEN)")
    stats.add_argument("--json", action="store_true",
                       help="print one JSON object per poll")
    stats.add_argument("--interval", type=_number(float, "--interval"),
                       metavar="SECONDS",
                       help="poll every SECONDS until Ctrl-C (or --count polls)")
    stats.add_argument("--count", type=_number(int, "--count"), metavar="N",
                       help="stop after N polls (default: 1 without --interval; "
                            "with --count and no --interval, polls are 1 s apart)")


# ----- serve -----

class ConfigError(ValueError):
    """An unreadable or invalid ``--config`` file."""


def load_config(path: str) -> dict[str, Any]:
    """The settings of a JSON config file, checked: ``tables`` as TableSpecs,
    a relative ``checkpoint_dir`` made relative to the file."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError("must hold a JSON object like {\"port\": 8000, "
                          "\"tables\": [...]}")
    unknown = sorted(set(raw) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(map(repr, unknown))}; "
                          f"keys are {', '.join(CONFIG_KEYS)}")
    conf: dict[str, Any] = {}
    if "port" in raw:
        port = raw["port"]
        if isinstance(port, bool) or not isinstance(port, int) \
                or not 0 <= port <= 65535:
            raise ConfigError(f"port must be an integer in [0, 65535], got {port!r}")
        conf["port"] = port
    for key in ("host", "token", "checkpoint_dir"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key]:
                raise ConfigError(f"{key} must be a non-empty string, got "
                                  f"{raw[key]!r}")
            conf[key] = raw[key]
    if "checkpoint_dir" in conf:
        conf["checkpoint_dir"] = os.path.join(
            os.path.dirname(os.path.abspath(path)), conf["checkpoint_dir"])
    if "checkpoint_on_exit" in raw:
        if not isinstance(raw["checkpoint_on_exit"], bool):
            raise ConfigError("checkpoint_on_exit must be true or false, got "
                              f"{raw['checkpoint_on_exit']!r}")
        conf["checkpoint_on_exit"] = raw["checkpoint_on_exit"]
    if "stats_every" in raw:
        every = raw["stats_every"]
        if isinstance(every, bool) or not isinstance(every, (int, float)) \
                or not 0 < every < float("inf"):
            raise ConfigError(f"stats_every must be a number > 0, got {every!r}")
        conf["stats_every"] = float(every)
    tables = raw.get("tables", [])
    if not isinstance(tables, list):
        raise ConfigError(f"tables must be a list, got {tables!r}")
    specs = []
    for i, entry in enumerate(tables):
        try:
            specs.append(table_spec_from_json(entry))
        except SpecError as exc:
            raise ConfigError(f"tables[{i}]: {exc}") from None
    conf["tables"] = specs
    return conf


def _settings(args: argparse.Namespace, parser: argparse.ArgumentParser
              ) -> dict[str, Any]:
    """The config file's settings overridden by the command line's."""
    conf: dict[str, Any] = {"tables": []}
    if args.config:
        try:
            conf = load_config(args.config)
        except ConfigError as exc:
            parser.error(f"--config {args.config}: {exc}")
    for key in ("port", "host", "token", "checkpoint_dir", "checkpoint_on_exit",
                "stats_every"):
        value = getattr(args, key)
        if value is not None:
            conf[key] = value
    conf["tables"] = [*conf["tables"], *args.tables]
    if conf.get("port") is None:
        parser.error("give --port PORT (0 picks a free port) or \"port\" in "
                     "--config")
    if not conf["tables"]:
        parser.error("give at least one --table SPEC (e.g. --table "
                     "name=replay,max_size=100000) or \"tables\" in --config")
    names = [t.name for t in conf["tables"]]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        parser.error(f"table name(s) given more than once: {', '.join(twice)}")
    if conf.get("checkpoint_on_exit") and not conf.get("checkpoint_dir"):
        parser.error("--checkpoint-on-exit needs --checkpoint-dir DIR")
    return conf


def _say(text: str) -> None:
    print(f"fastreplay serve: {text}", flush=True)


def run_serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``fastreplay serve``: serve until SIGINT/SIGTERM; 0 on a clean stop."""
    from fastreplay import errors
    from fastreplay.checkpointers import DefaultCheckpointer
    from fastreplay.server import Server

    conf = _settings(args, getattr(args, "subparser", parser))
    specs: list[TableSpec] = conf["tables"]
    checkpointer = None
    restoring = None
    if conf.get("checkpoint_dir"):
        try:
            checkpointer = DefaultCheckpointer(conf["checkpoint_dir"])
            latest = checkpointer.latest()
            restoring = os.path.abspath(latest) if latest else None
        except OSError as exc:
            print(f"fastreplay serve: error: cannot use checkpoint directory "
                  f"{conf['checkpoint_dir']}: {exc}", file=sys.stderr)
            return 1
    host = conf.get("host") or os.environ.get("FASTREPLAY_HOST") or "127.0.0.1"
    try:
        # host and token None: the Server reads FASTREPLAY_HOST/_TOKEN.
        server = Server([spec.build() for spec in specs], port=conf["port"],
                        checkpointer=checkpointer, host=conf.get("host"),
                        token=conf.get("token"))
    except OSError as exc:
        print(f"fastreplay serve: error: cannot listen on {host}:{conf['port']}: "
              f"{exc}", file=sys.stderr)
        return 1
    except (errors.DataLossError, ValueError) as exc:
        where = f" from {restoring}" if restoring else ""
        print(f"fastreplay serve: error: cannot restore the tables{where}: {exc}",
              file=sys.stderr)
        return 1
    try:
        if restoring:
            items = sum(t.info.current_size for t in server.tables.values())
            _say(f"restored {items} items from {restoring}")
        with _StopSignals() as stop:
            _say(f"listening on {server.host}:{server.port} "
                 f"(tables: {', '.join(t.name for t in specs)})")
            _serve_until(stop, server, conf.get("stats_every"))
        code = 0
        if conf.get("checkpoint_on_exit"):
            _say("writing a checkpoint (Ctrl-C again to exit without it)")
            try:
                _say(f"checkpoint written to {server.checkpoint()}")
            except (OSError, errors.ReverbError) as exc:
                print(f"fastreplay serve: error: the checkpoint failed: {exc}",
                      file=sys.stderr)
                code = 1
    finally:
        server.stop()
    _say("stopped")
    return code


class _StopSignals:
    """While entered, SIGINT and SIGTERM (main thread only) are recorded
    instead of interrupting; on exit the previous handlers come back, so a
    second Ctrl-C interrupts whatever follows."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.received.append(signum)

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _serve_until(stop: _StopSignals, server: Any,
                 stats_every: float | None) -> None:
    """Sleep until a signal arrives, printing stats lines meanwhile."""
    last = (time.monotonic(), _counters(server))
    while not stop.received:
        time.sleep(0.05)
        now = time.monotonic()
        if stats_every and now - last[0] >= stats_every:
            counters = _counters(server)
            for name, (size, max_size, inserts, samples) in counters.items():
                dt = now - last[0]
                _, _, inserts0, samples0 = last[1].get(name, (0, 0, 0, 0))
                _say(f"{name}: size {size}/{max_size}, "
                     f"{(inserts - inserts0) / dt:.1f} inserts/s, "
                     f"{(samples - samples0) / dt:.1f} samples/s")
            last = (now, counters)
    _say(f"{signal.Signals(stop.received[0]).name} received, stopping")


def _counters(server: Any) -> dict[str, tuple[int, int, int, int]]:
    out = {}
    for name, table in server.tables.items():
        info = table.info
        out[name] = (info.current_size, info.max_size, info.num_inserts,
                     info.num_samples)
    return out


# ----- stats -----

def _table_row(info: Any) -> dict[str, Any]:
    limiter = info.rate_limiter_info
    sampler = describe_selector(info.sampler_options)
    return {
        "name": info.name, "current_size": info.current_size,
        "max_size": info.max_size, "num_inserts": info.num_inserts,
        "num_samples": info.num_samples, "num_episodes": info.num_episodes,
        "num_deletes": info.num_deletes,
        "max_times_sampled": info.max_times_sampled,
        "sampler": sampler,
        "remover": describe_selector(info.remover_options),
        "rate_limiter": {
            "description": describe_rate_limiter(limiter, sampler),
            "samples_per_insert": limiter.samples_per_insert,
            "min_size_to_sample": limiter.min_size_to_sample,
            "min_diff": limiter.min_diff, "max_diff": limiter.max_diff,
            "blocked_inserts": limiter.insert_stats.blocked,
            "blocked_samples": limiter.sample_stats.blocked,
        },
    }


def _with_rates(rows: list[dict[str, Any]], previous: Mapping[str, Any] | None,
                dt: float) -> None:
    for row in rows:
        before = (previous or {}).get(row["name"])
        for key, rate in (("num_inserts", "inserts_per_s"),
                          ("num_samples", "samples_per_s")):
            row[rate] = None if before is None or dt <= 0 else round(
                (row[key] - before[key]) / dt, 3)


def format_stats(address: str, rows: list[dict[str, Any]], rates: bool) -> str:
    """The table ``fastreplay stats`` prints."""
    head = ["table", "size", "inserts", "samples", "episodes"]
    if rates:
        head += ["inserts/s", "samples/s"]
    head += ["sampler", "remover", "rate limiter"]
    lines = [head]
    for r in rows:
        line = [r["name"], f"{r['current_size']:,}/{r['max_size']:,}",
                f"{r['num_inserts']:,}", f"{r['num_samples']:,}",
                f"{r['num_episodes']:,}"]
        if rates:
            line += ["-" if r[k] is None else f"{r[k]:,.1f}"
                     for k in ("inserts_per_s", "samples_per_s")]
        line += [r["sampler"], r["remover"], r["rate_limiter"]["description"]]
        lines.append(line)
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    numeric = set(range(1, len(head) - 3))
    text = [f"fastreplay server {address}: {len(rows)} table(s), "
            f"{time.strftime('%H:%M:%S')}"]
    for row in lines:
        cells = [c.rjust(w) if i in numeric else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        text.append("  ".join(cells).rstrip())
    return "\n".join(text)


def run_stats(args: argparse.Namespace) -> int:
    """``fastreplay stats``: 0 after the last poll, 1 when unreachable."""
    from fastreplay import errors
    from fastreplay.client import Client

    interval = args.interval or 1.0
    count = args.count or (None if args.interval else 1)
    previous: dict[str, Any] | None = None
    last = 0.0
    polls = 0
    client: Client | None = None
    try:
        while True:
            try:
                client = client or Client(args.address, token=args.token)
                infos = client.server_info(timeout=args.timeout)
            except (errors.ReverbError, OSError) as exc:
                reason = str(exc)
                cause = exc.__cause__ or exc.__context__  # e.g. a refused token
                if cause is not None and str(cause) not in reason:
                    reason += f" ({cause})"
                print(f"fastreplay stats: error: cannot reach a fastreplay "
                      f"server at {args.address}: {reason}", file=sys.stderr)
                return 1
            now = time.monotonic()
            rows = [_table_row(info) for info in infos.values()]
            watching = count != 1
            if watching:
                _with_rates(rows, previous, now - last)
            if args.json:
                print(json.dumps({"address": args.address, "time": time.time(),
                                  "tables": rows}), flush=True)
            else:
                print(("\n" if polls else "")
                      + format_stats(args.address, rows, watching), flush=True)
            previous, last = {r["name"]: r for r in rows}, now
            polls += 1
            if count is not None and polls >= count:
                return 0
            time.sleep(interval)
    except KeyboardInterrupt:  # the normal end of --interval without --count
        return 0
