"""``fastreplay serve`` and ``fastreplay stats``: table specs and config files
(unit, no processes), then real ``python -m fastreplay serve`` processes on
loopback: the listening line, SIGINT/SIGTERM, checkpoints, clients and
``stats`` from other processes.  Every wait is bounded; every process this
file starts is killed in a ``finally``."""

from __future__ import annotations

import contextlib
import json
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from child_env import child_env

import fastreplay
from fastreplay import cli
from fastreplay.checkpointers import DefaultCheckpointer
from fastreplay.serve_cli import ConfigError, load_config
from fastreplay.table_spec import (
    SpecError,
    TableSpec,
    describe_rate_limiter,
    describe_selector,
    parse_table_spec,
    table_spec_from_json,
)

WAIT = 60.0  # bound of every wait on a process (a loaded CI machine is slow)


# ----- table specs -----

def test_spec_defaults_and_every_key() -> None:
    assert parse_table_spec("name=replay") == TableSpec("replay")
    spec = parse_table_spec(
        " name=r , sampler=prioritized:0.6,remover=heap:min,max_size=1000,"
        "max_times_sampled=3,rate_limiter=sample_to_insert_ratio:4:100:50,"
        "seed=7,")
    assert spec == TableSpec("r", "prioritized:0.6", "heap:min", 1000, 3,
                             "sample_to_insert_ratio:4:100:50", 7)
    info = spec.build().info
    assert (info.name, info.max_size, info.max_times_sampled) == ("r", 1000, 3)
    assert describe_selector(info.sampler_options) == "prioritized:0.6"
    assert describe_selector(info.remover_options) == "heap:min"
    limiter = info.rate_limiter_info
    assert (limiter.samples_per_insert, limiter.min_size_to_sample,
            limiter.min_diff, limiter.max_diff) == (4.0, 100, 350.0, 450.0)


@pytest.mark.parametrize("text, sampler", [
    ("uniform", "uniform"), ("FIFO", "fifo"), ("lifo", "lifo"),
    ("prioritized:0", "prioritized:0"), ("prioritized:1.5", "prioritized:1.5"),
    ("heap:max", "heap:max"), ("heap:MIN", "heap:min"),
    ("min_heap", "heap:min"), ("max_heap", "heap:max"),
])
def test_every_selector(text: str, sampler: str) -> None:
    table = parse_table_spec(f"name=t,sampler={text},remover={text}").build()
    assert describe_selector(table.info.sampler_options) == sampler
    assert describe_selector(table.info.remover_options) == sampler


@pytest.mark.parametrize("limiter, described", [
    ("min_size:1", "min_size:1"), ("min_size:1000", "min_size:1000"),
    ("sample_to_insert_ratio:0.5:10:2",
     "samples_per_insert=0.5 min_size=10 diff=[3, 7]"),
])
def test_every_rate_limiter(limiter: str, described: str) -> None:
    table = parse_table_spec(f"name=t,rate_limiter={limiter}").build()
    assert describe_rate_limiter(table.info.rate_limiter_info) == described


@pytest.mark.parametrize("spec, described", [
    ("rate_limiter=queue:10", "queue:10"), ("rate_limiter=stack:3", "stack:3"),
    ("rate_limiter=queue:10,sampler=uniform",
     "samples_per_insert=1 min_size=1 diff=[0, 10]"),
])
def test_queue_and_stack_are_described_by_their_sampler(spec: str,
                                                        described: str) -> None:
    info = parse_table_spec(f"name=t,{spec}").build().info
    assert describe_rate_limiter(
        info.rate_limiter_info, describe_selector(info.sampler_options)) == described


def test_queue_and_stack_default_to_reverb_queue_and_stack() -> None:
    assert parse_table_spec("name=q,rate_limiter=queue:10") == TableSpec(
        "q", "fifo", "fifo", 10, 1, "queue:10")
    assert parse_table_spec("name=s,rate_limiter=stack:5") == TableSpec(
        "s", "lifo", "lifo", 5, 1, "stack:5")
    # Keys given explicitly win over the queue's defaults.
    assert parse_table_spec(
        "name=q,rate_limiter=queue:10,max_size=20,sampler=uniform,"
        "max_times_sampled=0") == TableSpec("q", "uniform", "fifo", 20, 0,
                                            "queue:10")
    q = parse_table_spec("name=q,rate_limiter=queue:3").build()
    limiter = q.info.rate_limiter_info
    assert (limiter.min_diff, limiter.max_diff) == (0.0, 3.0)


@pytest.mark.parametrize("text, value", [("none", None), ("LZ4", "lz4"),
                                         ("auto", "auto")])
def test_spec_compression_is_the_tables_default(text, value):
    spec = parse_table_spec(f"name=t,compression={text}")
    assert spec.compression == value
    assert spec.build().info.compression == value


@pytest.mark.parametrize("text, message", [
    ("sampler=fifo", r"missing key 'name'"),
    ("name=a,colour=red", r"unknown key 'colour'; keys are name, sampler"),
    ("name=a,signature=x", r"unknown key 'signature' \(signatures cannot"),
    ("name=a,name=b", r"key 'name' given twice \('a' and 'b'\)"),
    ("name=a,max_size", r"'max_size' is not key=value"),
    ("name=", r"name: empty value"),
    ("name=a,sampler=", r"sampler: empty value"),
    ("name=a,sampler=random", r"sampler='random': unknown selector 'random'; "
                              r"choose from uniform, fifo"),
    ("name=a,remover=prio:1", r"remover='prio:1': unknown selector 'prio'"),
    ("name=a,sampler=prioritized", r"sampler='prioritized': expected "
                                   r"prioritized:EXPONENT"),
    ("name=a,sampler=prioritized:x", r"sampler='prioritized:x': the priority "
                                     r"exponent must be a number, got 'x'"),
    ("name=a,sampler=prioritized:-1", r"sampler='prioritized:-1': "
                                      r"priority_exponent .* >= 0"),
    ("name=a,sampler=prioritized:inf", r"sampler='prioritized:inf': .* finite"),
    ("name=a,sampler=prioritized:0.6:2", r"sampler='prioritized:0.6:2': "
                                         r"expected prioritized:EXPONENT"),
    ("name=a,remover=uniform:3", r"remover='uniform:3': uniform takes no value"),
    ("name=a,sampler=heap", r"sampler='heap': expected heap:min\|max"),
    ("name=a,sampler=heap:mid", r"sampler='heap:mid': heap takes min or max, "
                                r"got 'mid'"),
    ("name=a,max_size=0", r"max_size='0': must be >= 1"),
    ("name=a,max_size=-5", r"max_size='-5': must be >= 1"),
    ("name=a,max_size=1.5", r"max_size='1.5': must be an integer"),
    ("name=a,max_size=lots", r"max_size='lots': must be an integer"),
    ("name=a,max_times_sampled=-1", r"max_times_sampled='-1': must be >= 0"),
    ("name=a,max_times_sampled=x", r"max_times_sampled='x': must be an integer"),
    ("name=a,seed=-1", r"seed='-1': must be >= 0"),
    ("name=a,compression=zip", r"compression='zip': must be auto, lz4 or none"),
    ("name=a,seed=s", r"seed='s': must be an integer"),
    ("name=a,rate_limiter=bogus:1", r"rate_limiter='bogus:1': unknown rate "
                                    r"limiter 'bogus'; choose from min_size:N"),
    ("name=a,rate_limiter=min_size", r"rate_limiter='min_size': expected "
                                     r"min_size:N"),
    ("name=a,rate_limiter=min_size:0", r"rate_limiter='min_size:0': N must be "
                                       r">= 1, got '0'"),
    ("name=a,rate_limiter=min_size:x", r"rate_limiter='min_size:x': N must be "
                                       r"an integer, got 'x'"),
    ("name=a,rate_limiter=queue:0", r"rate_limiter='queue:0': N must be >= 1"),
    ("name=a,rate_limiter=stack:2.5", r"rate_limiter='stack:2.5': N must be an "
                                      r"integer"),
    ("name=a,rate_limiter=sample_to_insert_ratio:1:2",
     r"rate_limiter='sample_to_insert_ratio:1:2': expected "
     r"sample_to_insert_ratio:R:MIN:TOL"),
    ("name=a,rate_limiter=sample_to_insert_ratio:x:2:5",
     r"'sample_to_insert_ratio:x:2:5': R \(samples per insert\) must be a "
     r"number, got 'x'"),
    ("name=a,rate_limiter=sample_to_insert_ratio:nan:2:5",
     r"'sample_to_insert_ratio:nan:2:5': R .* must be finite"),
    ("name=a,rate_limiter=sample_to_insert_ratio:0:2:5",
     r"'sample_to_insert_ratio:0:2:5': samples_per_insert .* > 0"),
    ("name=a,rate_limiter=sample_to_insert_ratio:1:0:5",
     r"'sample_to_insert_ratio:1:0:5': MIN \(min size to sample\) must be >= 1"),
    ("name=a,rate_limiter=sample_to_insert_ratio:1:2:x",
     r"'sample_to_insert_ratio:1:2:x': TOL \(error buffer\) must be a number"),
    ("name=a,rate_limiter=sample_to_insert_ratio:1:2:0.5",
     r"'sample_to_insert_ratio:1:2:0.5': The size of error_buffer"),
])
def test_bad_spec_names_the_key_and_the_value(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_table_spec(text)


def test_bad_table_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["serve", "--port", "0", "--table", "name=a,max_size=x"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: fastreplay serve" in err
    assert ("argument --table: max_size='x': must be an integer "
            "(in 'name=a,max_size=x')") in err


@pytest.mark.parametrize("args, message", [
    (["--table", "name=a"], r"give --port PORT \(0 picks a free port\)"),
    (["--port", "0"], r"give at least one --table SPEC"),
    (["--port", "0", "--table", "name=a", "--table", "name=a,max_size=5"],
     r"table name\(s\) given more than once: a"),
    (["--port", "0", "--table", "name=a", "--checkpoint-on-exit"],
     r"--checkpoint-on-exit needs --checkpoint-dir DIR"),
    (["--port", "70000", "--table", "name=a"], r"--port must be <= 65535"),
    (["--port", "-1", "--table", "name=a"], r"--port must be >= 0"),
    (["--port", "0", "--table", "name=a", "--stats-every", "0"],
     r"--stats-every must be > 0"),
])
def test_serve_usage_errors(args: list[str], message: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["serve", *args])
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


# ----- config files -----

def test_config_file_settings_and_tables(tmp_path: Path) -> None:
    path = tmp_path / "server.json"
    path.write_text(json.dumps({
        "port": 8000, "host": "127.0.0.1", "checkpoint_dir": "ckpt",
        "checkpoint_on_exit": True, "stats_every": 2,
        "tables": [{"name": "replay", "sampler": "prioritized:0.6",
                    "max_size": 1000, "rate_limiter": "min_size:10", "seed": 3},
                   "name=queue,rate_limiter=queue:5"]}))
    conf = load_config(str(path))
    assert conf["port"] == 8000 and conf["host"] == "127.0.0.1"
    assert conf["checkpoint_dir"] == str(tmp_path / "ckpt")
    assert conf["checkpoint_on_exit"] is True and conf["stats_every"] == 2.0
    assert conf["tables"] == [
        TableSpec("replay", "prioritized:0.6", "fifo", 1000, 0, "min_size:10", 3),
        TableSpec("queue", "fifo", "fifo", 5, 1, "queue:5")]


@pytest.mark.parametrize("content, message", [
    ("{", r"not valid JSON: .*line 1"),
    ("[1, 2]", r"must hold a JSON object"),
    ('{"prot": 8000}', r"unknown key\(s\) 'prot'; keys are port, host"),
    ('{"port": "8000"}', r"port must be an integer in \[0, 65535\], got '8000'"),
    ('{"port": 65536}', r"port must be an integer in \[0, 65535\]"),
    ('{"port": true}', r"port must be an integer"),
    ('{"host": 5}', r"host must be a non-empty string, got 5"),
    ('{"checkpoint_on_exit": "yes"}', r"checkpoint_on_exit must be true or false"),
    ('{"stats_every": 0}', r"stats_every must be a number > 0, got 0"),
    ('{"tables": {"name": "a"}}', r"tables must be a list"),
    ('{"tables": [5]}', r"tables\[0\]: a table must be an object"),
    ('{"tables": [{"name": "a"}, {"max_size": 5}]}',
     r"tables\[1\]: missing key 'name'"),
    ('{"tables": [{"name": "a", "max_size": 1.5}]}',
     r"tables\[0\]: max_size='1.5': must be an integer"),
    ('{"tables": [{"name": "a", "max_size": true}]}',
     r"tables\[0\]: max_size: must be a string or a number, got True"),
    ('{"tables": [{"name": "a", "sampler": "prioritized:-2"}]}',
     r"tables\[0\]: sampler='prioritized:-2'"),
    ('{"tables": [{"name": "a", "signature": {}}]}',
     r"tables\[0\]: signature: must be a string or a number"),
])
def test_bad_config_file_is_a_clear_error(tmp_path: Path, content: str,
                                          message: str,
                                          capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_config(str(path))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["serve", "--port", "0", "--table", "name=b", "--config",
                  str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--config {path}: " in err and "Traceback" not in err


def test_missing_config_file(tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--config", str(tmp_path / "nope.json")])
    assert re.search(r"--config .*nope.json: cannot read it: No such file",
                     capsys.readouterr().err)


def test_table_spec_from_json_accepts_numbers_as_strings() -> None:
    assert table_spec_from_json({"name": "a", "max_size": "10"}) == \
        table_spec_from_json({"name": "a", "max_size": 10})


# ----- stats (server in this process) -----

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _insert(client: fastreplay.Client, table: str, n: int) -> None:
    for i in range(n):
        client.insert(np.full(3, i, np.float32), {table: 1.0 + i})


def test_stats_prints_every_table(capsys: pytest.CaptureFixture[str]) -> None:
    tables = [parse_table_spec(s).build() for s in (
        "name=replay,sampler=prioritized:0.6,max_size=100,"
        "rate_limiter=min_size:2", "name=queue,rate_limiter=queue:10")]
    with fastreplay.Server(tables) as server:
        client = server.localhost_client()
        _insert(client, "replay", 5)
        assert len(list(client.sample("replay", 3))) == 3
        assert cli.main(["stats", f"localhost:{server.port}"]) == 0
        out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"fastreplay server localhost:{server.port}: "
                             "2 table(s)")
    assert out[1].split() == ["table", "size", "inserts", "samples", "episodes",
                              "sampler", "remover", "rate", "limiter"]
    assert out[2].split() == ["replay", "5/100", "5", "3", "5",
                              "prioritized:0.6", "fifo", "min_size:2"]
    assert out[3].split() == ["queue", "0/10", "0", "0", "0", "fifo", "fifo",
                              "queue:10"]


def test_stats_json_with_rates_between_polls(
        capsys: pytest.CaptureFixture[str]) -> None:
    with fastreplay.Server([parse_table_spec("name=r").build()]) as server:
        _insert(server.localhost_client(), "r", 4)
        assert cli.main(["stats", f"127.0.0.1:{server.port}", "--json",
                         "--interval", "0.05", "--count", "2"]) == 0
        polls = [json.loads(line) for line in
                 capsys.readouterr().out.splitlines()]
    assert len(polls) == 2
    first, second = (p["tables"][0] for p in polls)
    assert first["inserts_per_s"] is None and second["inserts_per_s"] == 0
    assert {k: second[k] for k in ("name", "current_size", "max_size",
                                   "num_inserts", "num_samples")} == {
        "name": "r", "current_size": 4, "max_size": 1_000_000,
        "num_inserts": 4, "num_samples": 0}
    assert second["rate_limiter"]["description"] == "min_size:1"
    assert second["sampler"] == "uniform" and second["remover"] == "fifo"


def test_stats_unreachable_server_exits_1_without_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    address = f"127.0.0.1:{_free_port()}"
    assert cli.main(["stats", address, "--timeout", "0.2"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        f"fastreplay stats: error: cannot reach a fastreplay server at {address}")
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("address", ["localhost", "localhost:http", "h:70000"])
def test_stats_bad_address_is_a_usage_error(
        address: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["stats", address])
    assert exit_info.value.code == 2
    assert "the server address must be HOST:PORT" in capsys.readouterr().err


# ----- real server processes -----

def _env() -> dict[str, str]:
    # loopback, no token, whatever the caller's shell
    return child_env("FASTREPLAY_HOST", "FASTREPLAY_TOKEN")


class ServeProcess:
    """``python -m fastreplay serve ARGS``; stdout read line by line by a
    thread, stderr to a file."""

    def __init__(self, *args: str, cwd: Path) -> None:
        self.stderr_path = cwd / f"serve-stderr-{time.monotonic_ns()}.txt"
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fastreplay", "serve", *args], cwd=cwd,
                env=_env(), stdout=subprocess.PIPE, stderr=err, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first new stdout line matching ``pattern`` (bounded wait)."""
        deadline = time.monotonic() + WAIT
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                raise AssertionError(
                    f"no line matching {pattern!r} (exit code {self.proc.poll()})"
                    f"; stdout: {self.output}; stderr: {self.stderr()}")
            self.output.append(line)
            match = re.search(pattern, line)
            if match:
                return match

    def listening(self) -> str:
        """The address of the listening line."""
        match = self.wait_for(r"^fastreplay serve: listening on "
                              r"(127\.0\.0\.1:(\d+)) \(tables: (.*)\)$")
        assert int(match.group(2)) > 0
        return match.group(1)

    def stop(self, sig: int = signal.SIGINT) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=WAIT)

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def kill(self) -> None:
        """Kill the process if it still runs; close its pipe."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT)
        self.reader.join(timeout=WAIT)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[type[ServeProcess]]:
    """Start ``fastreplay serve`` processes; all are killed afterwards."""
    started: list[ServeProcess] = []

    class Started(ServeProcess):
        def __init__(self, *args: str, cwd: Path = tmp_path) -> None:
            super().__init__(*args, cwd=cwd)
            started.append(self)

    try:
        yield Started
    finally:
        for process in started:
            process.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_listens_and_stops_cleanly_on_a_signal(
        serve: type[ServeProcess], sig: int) -> None:
    server = serve("--port", "0", "--table", "name=replay,sampler=prioritized:0.6",
                   "--table", "name=queue,rate_limiter=queue:10")
    match = server.wait_for(r"listening on 127\.0\.0\.1:(\d+) \(tables: (.*)\)$")
    assert match.group(2) == "replay, queue"
    assert server.stop(sig) == 0, server.stderr()
    server.wait_for(rf"^fastreplay serve: {signal.Signals(sig).name} received")
    server.wait_for(r"^fastreplay serve: stopped$")
    assert server.stderr() == ""


def test_serve_port_in_use_exits_1(serve: type[ServeProcess]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = serve("--port", str(port), "--table", "name=a")
        assert server.proc.wait(timeout=WAIT) == 1
    err = server.stderr()
    assert f"fastreplay serve: error: cannot listen on 127.0.0.1:{port}" in err
    assert "Traceback" not in err


def test_serve_stats_every_prints_sizes_and_rates(
        serve: type[ServeProcess]) -> None:
    server = serve("--port", "0", "--table", "name=a,max_size=50",
                   "--stats-every", "0.1")
    server.listening()
    server.wait_for(r"^fastreplay serve: a: size 0/50, 0\.0 inserts/s, "
                    r"0\.0 samples/s$")
    assert server.stop() == 0


SPEC = "name=replay,sampler=prioritized:0.6,max_size=100,rate_limiter=min_size:1"


def test_serve_restores_a_checkpoint_and_checkpoints_on_exit(
        serve: type[ServeProcess], tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    # A checkpoint of 7 items, written by a server in this process.
    with fastreplay.Server([parse_table_spec(SPEC).build()],
                           checkpointer=DefaultCheckpointer(str(ckpt))) as local:
        _insert(local.localhost_client(), "replay", 7)
        first = local.localhost_client().checkpoint()
    server = serve("--port", "0", "--table", SPEC, "--checkpoint-dir", "ckpt",
                   "--checkpoint-on-exit")
    server.wait_for(rf"^fastreplay serve: restored 7 items from {re.escape(first)}$")
    server.listening()
    assert server.stop() == 0, server.stderr()
    second = server.wait_for(r"^fastreplay serve: checkpoint written to (.*)$")[1]
    assert second != first and Path(second).parent == ckpt
    # The new checkpoint restores the same items in this process.
    table = parse_table_spec(SPEC).build()
    with fastreplay.Server([table], checkpointer=DefaultCheckpointer(str(ckpt))):
        assert table.info.current_size == 7


def test_serve_refuses_a_checkpoint_of_other_tables(
        serve: type[ServeProcess], tmp_path: Path) -> None:
    with fastreplay.Server([parse_table_spec(SPEC).build()],
                           checkpointer=DefaultCheckpointer(
                               str(tmp_path / "ckpt"))) as local:
        local.localhost_client().checkpoint()
    server = serve("--port", "0", "--table", SPEC.replace("100", "200"),
                   "--checkpoint-dir", "ckpt")
    assert server.proc.wait(timeout=WAIT) == 1
    err = server.stderr()
    assert "fastreplay serve: error: cannot restore the tables from" in err
    assert "Traceback" not in err


def test_serve_from_a_config_file(serve: type[ServeProcess],
                                  tmp_path: Path) -> None:
    (tmp_path / "server.json").write_text(json.dumps({
        "port": 0, "tables": [{"name": "b", "max_size": 10}, "name=c"]}))
    server = serve("--config", "server.json", "--table", "name=a")
    server.wait_for(r"listening on 127\.0\.0\.1:\d+ \(tables: b, c, a\)$")
    assert server.stop() == 0


# ----- clients in this (another) process -----

@contextlib.contextmanager
def remote_client(address: str) -> Iterator[fastreplay.Client]:
    """A Client of a server process, its sockets closed on exit (not left
    to the garbage collector: ResourceWarning is an error here)."""
    client = fastreplay.Client(address)
    try:
        yield client
    finally:
        close = getattr(client, "close", None) or client._backend.close
        close()


def _stats(*args: str, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastreplay", "stats", *args],
                          env={**_env(), **(env or {})}, capture_output=True,
                          text=True, timeout=WAIT)


def test_clients_in_other_processes_reach_the_served_tables(
        serve: type[ServeProcess]) -> None:
    server = serve("--port", "0", "--table", SPEC,
                   "--table", "name=queue,rate_limiter=queue:10",
                   "--stats-every", "0.2")
    address = server.listening()
    with remote_client(address) as client:
        infos = client.server_info(timeout=WAIT)
        _insert(client, "replay", 5)
        info, data = client.sample_batch("replay", 4, timeout=WAIT)
    assert sorted(infos) == ["queue", "replay"]
    assert infos["replay"].max_size == 100 and infos["queue"].max_size == 10
    assert describe_selector(infos["replay"].sampler_options) == "prioritized:0.6"
    # The server's own stats lines see the inserts.
    server.wait_for(r"^fastreplay serve: replay: size 5/100, ")
    assert data[0].shape == (4, 1, 3)
    np.testing.assert_array_equal(data[0][:, 0, 0], info.priority - 1)
    # `fastreplay stats` from a third process.
    out = _stats(address, "--timeout", str(WAIT))
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert rows["replay"][1:5] == ["5/100", "5", "4", "5"]
    assert rows["queue"][1] == "0/10"
    out = _stats(address, "--json", "--interval", "0.05", "--count", "2")
    assert out.returncode == 0, out.stderr
    polls = [json.loads(line) for line in out.stdout.splitlines()]
    assert [p["tables"][0]["num_inserts"] for p in polls] == [5, 5]
    assert server.stop() == 0, server.stderr()
    # The server is gone: stats says so and exits 1.
    out = _stats(address, "--timeout", "0.5")
    assert out.returncode == 1
    assert out.stderr.startswith("fastreplay stats: error: cannot reach")
    assert "Traceback" not in out.stderr


def test_checkpoint_on_exit_restores_client_items_in_a_new_server_process(
        serve: type[ServeProcess], tmp_path: Path) -> None:
    args = ("--port", "0", "--table", SPEC, "--checkpoint-dir", "ckpt",
            "--checkpoint-on-exit")
    first = serve(*args)
    with remote_client(first.listening()) as client:
        _insert(client, "replay", 6)
    assert first.stop() == 0, first.stderr()
    first.wait_for(r"^fastreplay serve: checkpoint written to ")
    second = serve(*args)
    second.wait_for(r"^fastreplay serve: restored 6 items from ")
    with remote_client(second.listening()) as client:
        assert client.server_info(timeout=WAIT)["replay"].current_size == 6
        info, data = client.sample_batch("replay", 6, timeout=WAIT)
    np.testing.assert_array_equal(data[0][:, 0, 0], info.priority - 1)
    assert second.stop(signal.SIGTERM) == 0, second.stderr()


def test_serve_with_a_token_refuses_clients_without_it(
        serve: type[ServeProcess]) -> None:
    server = serve("--port", "0", "--host", "127.0.0.1", "--token", "s3cret",
                   "--table", "name=a")
    address = server.listening()
    out = _stats(address, "--timeout", "2")
    assert out.returncode == 1
    assert out.stderr.startswith("fastreplay stats: error: cannot reach")
    assert "wrong or missing token" in out.stderr
    assert "Traceback" not in out.stderr
    out = _stats(address, "--token", "s3cret", "--timeout", str(WAIT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[2].split()[:2] == ["a", "0/1,000,000"]
    out = _stats(address, "--timeout", str(WAIT),
                 env={"FASTREPLAY_TOKEN": "s3cret"})
    assert out.returncode == 0, out.stderr
    assert server.stop() == 0, server.stderr()


def test_serve_reports_a_failed_checkpoint_on_exit(
        serve: type[ServeProcess], tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    server = serve("--port", "0", "--table", "name=a", "--checkpoint-dir",
                   str(ckpt), "--checkpoint-on-exit")
    server.listening()
    ckpt.write_text("a file where the checkpoint directory should be")
    assert server.stop() == 1
    assert "fastreplay serve: error: the checkpoint failed: " in server.stderr()
    assert "Traceback" not in server.stderr()
    server.wait_for(r"^fastreplay serve: stopped$")
