"""Checkpoints cannot be turned against the reader (issue 11, part 1) and
nothing deletes what fastreplay did not write (part 2).

Every forgery recomputes the checksums (tests/checkpoint_forge.py), so what
is tested is the reader's own validation: kinds, sizes, counts, names,
file types, structure, and that it loads nothing."""

from __future__ import annotations

import json
import os
import pathlib
import struct
import threading

import numpy as np
import pytest
from checkpoint_forge import (
    checkpoint_dir,
    load_manifest,
    restore,
    rewrite_file,
    save_manifest,
    small_tables,
    write_small,
)

import fastreplay as reverb
from fastreplay import errors
from fastreplay._checkpoint_load import CHUNK, COLUMN, ITEM, SLICE
from fastreplay.checkpointers import DefaultCheckpointer


@pytest.fixture
def ckpt(tmp_path) -> str:
    return write_small(str(tmp_path))


def _refused(root: str, exc: type[Exception] = errors.DataLossError,
             match: str | None = None) -> None:
    tables = small_tables()
    with pytest.raises(exc, match=match):
        DefaultCheckpointer(root).restore({t.name: t for t in tables},
                                          reverb.ChunkStore())
    assert all(len(t) == 0 for t in tables)


def test_the_real_checkpoint_restores(ckpt) -> None:
    tables = restore(os.path.dirname(ckpt))
    assert [len(t) for t in tables] == [11, 12]


# ----- the manifest -----

@pytest.mark.parametrize("edit", [
    lambda t: t["counters"].__setitem__(0, t["counters"][0] + 1),
    lambda t: t["specs"][0].__setitem__(2, t["specs"][0][2] + [1]),  # same bytes
    lambda t: t["stats"].__setitem__("num_samples", 5),
])
def test_edited_manifest_without_its_checksum_is_refused(ckpt, edit) -> None:
    doc = load_manifest(ckpt)
    edit(doc["tables"][0])
    pathlib.Path(ckpt, "manifest.json").write_text(json.dumps(doc))
    _refused(os.path.dirname(ckpt), match="manifest.*corrupt or truncated")


def test_version_1_checkpoint_is_refused_clearly(ckpt) -> None:
    os.remove(os.path.join(ckpt, "manifest.crc"))
    _refused(os.path.dirname(ckpt), match="version 1 is not supported")


def test_future_version_is_refused(ckpt) -> None:
    doc = load_manifest(ckpt)
    doc["version"] = 99
    save_manifest(ckpt, doc)
    pathlib.Path(ckpt, "manifest.crc").write_text(
        pathlib.Path(ckpt, "manifest.crc").read_text().replace(" 2 ", " 99 "))
    _refused(os.path.dirname(ckpt), match="version 99")


def _spec_edit(ckpt: str, fn) -> None:
    doc = load_manifest(ckpt)
    fn(doc["tables"][0]["specs"])
    save_manifest(ckpt, doc)


@pytest.mark.parametrize("edit", [
    lambda s: s[0].__setitem__(0, "O"),        # integers as object pointers
    lambda s: s[0].__setitem__(0, "V"),
    lambda s: s[0].__setitem__(0, "U"),
    lambda s: s[0].__setitem__(0, "ii"),
    lambda s: s[0].__setitem__(0, 7),
    lambda s: s[0].__setitem__(1, 3),          # itemsize that no kind has
    lambda s: s[0].__setitem__(1, 2**70),
    lambda s: s[0].__setitem__(2, [2**40, 2**40]),
    lambda s: s[0].__setitem__(2, [-1]),
    lambda s: s[0].__setitem__(2, [1] * 17),
    lambda s: s[0].__setitem__(2, "16"),
])
def test_forged_spec_is_refused(ckpt, edit) -> None:
    _spec_edit(ckpt, edit)
    _refused(os.path.dirname(ckpt))


def test_int_kind_edited_to_object_is_refused_not_sampled(ckpt) -> None:
    doc = load_manifest(ckpt)
    specs = doc["tables"][0]["specs"]
    index = next(i for i, s in enumerate(specs) if s[0] in "iu")
    specs[index][0] = "O"
    save_manifest(ckpt, doc)
    _refused(os.path.dirname(ckpt), match="unsupported kind 'O'")


@pytest.mark.parametrize("edit", [
    lambda s: s[0].__setitem__(2, s[0][2] + [2]),   # shape: other row size
    lambda s: s[0].__setitem__(1, s[0][1] * 2 if s[0][1] < 8 else 4),  # dtype
])
def test_edited_dtype_or_shape_is_refused(ckpt, edit) -> None:
    _spec_edit(ckpt, edit)
    _refused(os.path.dirname(ckpt), match="does not fit")


@pytest.mark.parametrize("field,value", [
    ("num_items", 10**6), ("num_items", 2**40), ("num_items", -1),
    ("num_items", 2**80), ("num_items", 1.5), ("counters", [1, 2]),
    ("counters", [2**64, 0, 0]), ("counters", "x"), ("stats", {"num_inserts": 2**70}),
    ("stats", []), ("config", None), ("config", {"max_size": 100}),
    ("name", 5), ("items_file", "../chunks.bin"), ("items_file", "chunks.bin"),
    ("specs", {}), ("specs", [[]]),
])
def test_edited_table_field_is_refused(ckpt, field, value) -> None:
    doc = load_manifest(ckpt)
    doc["tables"][0][field] = value
    save_manifest(ckpt, doc)
    _refused(os.path.dirname(ckpt))


def test_num_items_smaller_than_the_file_is_refused(ckpt) -> None:
    doc = load_manifest(ckpt)
    doc["tables"][0]["num_items"] -= 1
    save_manifest(ckpt, doc)
    _refused(os.path.dirname(ckpt), match="trailing bytes|do not match")


def test_emptied_file_list_is_refused(ckpt) -> None:
    doc = load_manifest(ckpt)
    doc["files"] = {}
    save_manifest(ckpt, doc)
    _refused(os.path.dirname(ckpt), match="repeated or unknown|do not match")


@pytest.mark.parametrize("raw", [
    b"[" * 100000 + b"]" * 100000,               # RecursionError before
    b'{"format": "fastreplay-checkpoint", "version": 2, "files": {}, '
    b'"tables": [], "structures": [null], "x": 1' + b"0" * 5000 + b"}",
    b'{"format": "fastreplay-checkpoint", "version": 2}',   # KeyError before
    b'{"format": "fastreplay-checkpoint", "version": 2, "files": [], "tables": 1}',
    b'{"format": "fastreplay-checkpoint", "version": 2, "files": {}, '
    b'"tables": [], "structures": [null, ' + b'{"list": [' * 5000
    + b"]}" * 5000 + b"]}",
    b"NaN", b"\xff\xfe", b"",
])
def test_malformed_manifest_raises_data_loss(ckpt, raw) -> None:
    save_manifest(ckpt, None, raw=raw)
    _refused(os.path.dirname(ckpt))


@pytest.mark.parametrize("structure", [
    {"namedtuple": ["os", "path", ["a b"], [None]]}, {"dict": [[[1], None]]},
    {"list": 1}, {"weird": []}, 5, {"dict": [[{"tuple": [[]]}, None]]},
])
def test_malformed_structure_raises_data_loss(ckpt, structure) -> None:
    doc = load_manifest(ckpt)
    doc["structures"].append(structure)
    save_manifest(ckpt, doc)
    _refused(os.path.dirname(ckpt), match="structure")


def test_structure_with_wrong_leaf_count_is_refused(ckpt) -> None:
    doc = load_manifest(ckpt)
    doc["structures"] = [None if s is None else {"list": [None]}
                         for s in doc["structures"]]
    save_manifest(ckpt, doc)
    _refused(os.path.dirname(ckpt), match="columns but its structure")


# ----- file names and file types -----

@pytest.mark.parametrize("name", ["/dev/zero", "../x.bin", "sub/items-0.bin",
                                  "items-0.bin\x00", ".", ""])
def test_file_names_outside_the_folder_are_refused(ckpt, name) -> None:
    doc = load_manifest(ckpt)
    doc["files"][name] = {"bytes": 0, "crc32": 0}
    doc["tables"][0]["items_file"] = name
    save_manifest(ckpt, doc)
    _refused(os.path.dirname(ckpt), match="bad file name")


def test_symlinked_data_file_is_refused(ckpt, tmp_path) -> None:
    target = tmp_path / "elsewhere.bin"
    os.rename(os.path.join(ckpt, "items-0.bin"), target)
    os.symlink(target, os.path.join(ckpt, "items-0.bin"))
    _refused(os.path.dirname(ckpt), match="items-0.bin")


def test_symlink_to_dev_zero_is_refused_without_reading(ckpt) -> None:
    os.remove(os.path.join(ckpt, "chunks.bin"))
    os.symlink("/dev/zero", os.path.join(ckpt, "chunks.bin"))
    _refused(os.path.dirname(ckpt), match="chunks.bin")


def test_fifo_data_file_is_refused_without_hanging(ckpt) -> None:
    os.remove(os.path.join(ckpt, "items-1.bin"))
    os.mkfifo(os.path.join(ckpt, "items-1.bin"))
    _refused(os.path.dirname(ckpt), match="not a regular file")


def test_fifo_manifest_is_refused_without_hanging(ckpt) -> None:
    os.remove(os.path.join(ckpt, "manifest.crc"))
    os.mkfifo(os.path.join(ckpt, "manifest.crc"))
    _refused(os.path.dirname(ckpt), match="not a regular file")


# ----- declared sizes -----

def _chunks(ckpt: str) -> bytearray:
    return bytearray(pathlib.Path(ckpt, "chunks.bin").read_bytes())


@pytest.mark.parametrize("field,value", [
    (8, 2**40), (8, -1), (6, 2**31 - 1), (6, -5), (5, 2**40), (5, -1), (7, 2),
])
def test_forged_chunk_header_size_is_refused_before_allocating(ckpt, field,
                                                               value) -> None:
    data = _chunks(ckpt)
    header = list(CHUNK.unpack_from(data, 0))
    header[field] = value
    CHUNK.pack_into(data, 0, *header)
    rewrite_file(ckpt, "chunks.bin", bytes(data))
    _refused(os.path.dirname(ckpt), match="inconsistent")


def test_compressed_chunk_with_forged_row_count_is_refused(ckpt) -> None:
    data = _chunks(ckpt)
    at = 0
    while True:  # the first compressed chunk (the uint8 frames compress)
        header = list(CHUNK.unpack_from(data, at))
        if header[7]:
            break
        at += CHUNK.size + header[8]
    header[6] += 1
    CHUNK.pack_into(data, at, *header)
    rewrite_file(ckpt, "chunks.bin", bytes(data))
    _refused(os.path.dirname(ckpt), match="inconsistent")


def test_item_with_forged_slice_count_is_refused(ckpt) -> None:
    data = bytearray(pathlib.Path(ckpt, "items-0.bin").read_bytes())
    struct.pack_into("<I", data, 32 + 5, 2**31)  # first column's n_slices
    rewrite_file(ckpt, "items-0.bin", bytes(data))
    _refused(os.path.dirname(ckpt), match="slices")


def test_two_items_of_one_key_are_refused(ckpt) -> None:
    """A writer's keys are consecutive, so a flipped bit in a key can make
    it a neighbour's: the reader refuses the file before restoring any."""
    data = bytearray(pathlib.Path(ckpt, "items-0.bin").read_bytes())
    first_key, *_, n_cols, _ = ITEM.unpack_from(data, 0)
    at = ITEM.size
    for _ in range(n_cols):
        n_slices = COLUMN.unpack_from(data, at)[2]
        at += COLUMN.size + n_slices * SLICE.size
    struct.pack_into("<Q", data, at, first_key)  # the second item's key
    rewrite_file(ckpt, "items-0.bin", bytes(data))
    _refused(os.path.dirname(ckpt), match="appears twice")


# ----- concurrency, leftovers, pruning -----

def test_two_threads_checkpointing_concurrently_both_succeed(tmp_path) -> None:
    server = reverb.Server(small_tables(),
                           checkpointer=DefaultCheckpointer(str(tmp_path)))
    server.tables["a"].insert(1, 1.0)
    client = server.localhost_client()
    paths: list[str] = []
    failures: list[BaseException] = []

    def save() -> None:
        try:
            for _ in range(5):
                paths.append(client.checkpoint())
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=save) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failures and len(paths) == 10
    assert os.listdir(tmp_path) == [os.path.basename(max(paths))]


def test_killed_save_leftover_is_cleaned_at_next_save_and_restore(ckpt) -> None:
    root = os.path.dirname(ckpt)
    for n in range(2):
        left = os.path.join(root, f".incomplete-20200101T000000000000Z-abc{n}")
        os.mkdir(left)
        pathlib.Path(left, "FASTREPLAY_CHECKPOINT").write_text(
            "fastreplay checkpoint\n")
        pathlib.Path(left, "chunks.bin").write_bytes(b"x" * 10)
        if n == 0:
            restore(root)
        else:
            server = reverb.Server(small_tables(),
                                   checkpointer=DefaultCheckpointer(root))
            server.localhost_client().checkpoint()
        assert not os.path.exists(left)


def test_pruning_deletes_only_this_checkpointers_checkpoints(tmp_path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    old = write_small(str(root))
    (root / "logs").mkdir()
    (root / "logs" / "events.txt").write_text("keep")
    (root / "notes.txt").write_text("keep")
    (root / "20000101T000000000000Z").mkdir()  # our name, not our marker
    os.symlink(outside, root / "link-out")
    os.symlink(outside, root / "20000101T000000000001Z")
    (root / ".incomplete-foreign").mkdir()
    new = write_small(str(root))
    assert not os.path.exists(old)
    assert sorted(os.listdir(root)) == sorted([
        os.path.basename(new), "logs", "notes.txt", "20000101T000000000000Z",
        "link-out", "20000101T000000000001Z", ".incomplete-foreign"])
    assert (root / "logs" / "events.txt").read_text() == "keep"
    assert (outside / "precious.txt").read_text() == "keep"
    restore(str(root))  # the newest, ours, is the one restored
    assert os.path.isdir(new)


def test_a_checkpoint_dated_in_the_future_does_not_stall_saves(tmp_path) -> None:
    future = write_small(str(tmp_path))
    later = os.path.join(str(tmp_path), "29991231T235959999999Z")
    os.rename(future, later)  # as if the clock had been set back
    newest = write_small(str(tmp_path))
    assert os.path.basename(newest) > os.path.basename(later)
    assert os.listdir(tmp_path) == [os.path.basename(newest)]


def test_symlinked_checkpoint_is_not_taken_as_latest(tmp_path) -> None:
    real = write_small(str(tmp_path / "a"))
    root = tmp_path / "b"
    root.mkdir()
    os.symlink(real, root / "29990101T000000000000Z")
    assert DefaultCheckpointer(str(root)).latest() is None


def test_foreign_directory_in_the_root_survives_saves(tmp_path) -> None:
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "log.txt").write_text("data")
    server = reverb.Server(small_tables(),
                           checkpointer=DefaultCheckpointer(str(tmp_path)))
    client = server.localhost_client()
    client.checkpoint()
    client.checkpoint()
    assert (tmp_path / "experiment" / "log.txt").read_text() == "data"


def test_checkpoint_dir_helper(ckpt) -> None:
    assert checkpoint_dir(os.path.dirname(ckpt)) == ckpt
    assert np.dtype("i4").kind == "i"  # kinds the manifest uses
