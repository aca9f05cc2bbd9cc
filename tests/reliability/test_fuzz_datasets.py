"""Fuzz tests (hypothesis) of the dataset readers: IDX, CIFAR, TFRecord (plain, GZIP, ZLIB),
``tf.train.Example``, shards (bytes and header fields) and ``synthetic_tokens`` options.

Every input is random bytes or a valid file mutated (truncated, bytes flipped, a declared size
overwritten); the reader must either return or raise a Deep500Error subclass with a clean message,
never another exception type and never a hang. Files are a few kilobytes; the ``ci`` profile of
tests/conftest.py bounds and seeds the runs (``--fuzz-long`` runs for hours).
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import tempfile
import zlib

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import example, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from catalog_support import assert_clean_message  # noqa: E402
from deep500lite import datasets  # noqa: E402
from deep500lite.datasets import (ShardDataset, parse_example, read_cifar_batch, read_idx, read_tfrecord,  # noqa: E402
                                  serialize_example, verify_shard, write_shards, write_tfrecord)
from deep500lite.datasets.tfrecord import masked_crc32c  # noqa: E402
from deep500lite.errors import Deep500Error  # noqa: E402
from deep500lite.lv2.dataset import NumpyDataset  # noqa: E402

# A mutation: ("cut", position) truncates; ("flip", position, mask) xors one byte; ("put", position,
# value, width) overwrites a little- or big-endian integer (a declared size, a count, a length).
_MUTATION = st.one_of(
    st.tuples(st.just("cut"), st.integers(0, 1 << 16)),
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(1, 255)),
    st.tuples(st.just("put"), st.integers(0, 1 << 16), st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**40, 2**63]),
              st.sampled_from([4, 8]), st.sampled_from(["<", ">"])),
)
_MUTATIONS = st.lists(_MUTATION, min_size=1, max_size=4)


def _mutate(data: bytes, mutations) -> bytes:
    out = bytearray(data)
    for m in mutations:
        if not out:
            break
        pos = m[1] % len(out)
        if m[0] == "cut":
            del out[pos:]
        elif m[0] == "flip":
            out[pos] ^= m[2]
        else:
            value, width, order = m[2], m[3], m[4]
            packed = (value % (1 << (8 * width))).to_bytes(width, "little" if order == "<" else "big")
            out[pos:pos + width] = packed
    return bytes(out)


def _outcome(fn, *args, **kwargs):
    """Call ``fn``: a result, or a Deep500Error with a clean message; any other exception fails the test."""
    try:
        return fn(*args, **kwargs)
    except Deep500Error as exc:
        assert_clean_message(str(exc))
        return exc


def _in_file(data: bytes, name: str, fn, *args, **kwargs):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(data)
        return _outcome(fn, path, *args, **kwargs)


# -------------------------------------------------------------------------------------- valid files
def _idx_bytes(gz: bool) -> bytes:
    data = bytes([0, 0, 8, 3]) + struct.pack(">3I", 3, 4, 5) + bytes(range(60))
    return gzip.compress(data, mtime=0) if gz else data


_IDX_PLAIN, _IDX_GZIP = _idx_bytes(False), _idx_bytes(True)
_CIFAR = bytes([3]) + bytes(range(256)) * 12 + bytes([7]) + bytes(3072)
_RECORDS = [b"", b"hello", bytes(range(200)), serialize_example({"x": [1.5, 2.0], "y": [3], "n": [b"ab"]})]


def _tfrecord_bytes(compression) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "r")
        write_tfrecord(path, _RECORDS, compression=compression)
        with open(path, "rb") as f:
            return f.read()


_TF = {c: _tfrecord_bytes(c) for c in (None, "GZIP", "ZLIB")}


def _shard_bytes() -> bytes:
    x = np.linspace(0, 1, 5 * 12, dtype=np.float32).reshape(5, 3, 2, 2)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "s.d5shard")
        write_shards(NumpyDataset(x, "input", np.arange(5) % 3, "label"), path, image_dtype="uint8")
        with open(path, "rb") as f:
            return f.read()


_SHARD = _shard_bytes()


def _read_tf(path, compression):
    return list(read_tfrecord(path, compression))


def _read_shard(path):
    ds = ShardDataset(path, "input", "label")
    batch = ds[np.arange(len(ds))]
    verify_shard(path)
    return batch


# -------------------------------------------------------------------------------------------- tests
@given(st.binary(max_size=600))
@example(bytes([0, 0, 8, 4]) + struct.pack(">4I", *(2**32 - 1,) * 4))  # dims whose product overflows int64
@example(bytes([0, 0, 8, 0]))  # zero dimensions: a scalar
def test_fuzz_idx_random_bytes(data):
    _in_file(data, "x-idx", read_idx)


@given(st.booleans(), _MUTATIONS)
def test_fuzz_idx_mutated(gz, mutations):
    result = _in_file(_mutate(_IDX_GZIP if gz else _IDX_PLAIN, mutations), "x-idx", read_idx)
    assert isinstance(result, (np.ndarray, Deep500Error))


@given(st.binary(max_size=8000), st.sampled_from([1, 2]))
def test_fuzz_cifar_random_bytes(data, label_bytes):
    _in_file(data, "b.bin", read_cifar_batch, label_bytes, (10, 100)[:label_bytes])


@given(_MUTATIONS)
def test_fuzz_cifar_mutated(mutations):
    result = _in_file(_mutate(_CIFAR, mutations), "b.bin", read_cifar_batch, 1, (10,))
    if not isinstance(result, Deep500Error):
        images, labels = result
        assert images.shape[1:] == (3, 32, 32) and len(images) == len(labels) and labels.max() < 10


@given(st.binary(max_size=600), st.sampled_from([None, "GZIP", "ZLIB"]))
def test_fuzz_tfrecord_random_bytes(data, compression):
    _in_file(data, "r.tfrecord", _read_tf, compression)


@given(st.sampled_from([None, "GZIP", "ZLIB"]), _MUTATIONS)
@example("GZIP", [("put", 0, 0, 4, "<")])  # a damaged gzip magic number
def test_fuzz_tfrecord_mutated(compression, mutations):
    result = _in_file(_mutate(_TF[compression], mutations), "r.tfrecord", _read_tf, compression)
    if not isinstance(result, Deep500Error):  # the CRCs passed: what came back is what was written
        assert result == _RECORDS[:len(result)]


@given(st.integers(0, 2**64 - 1))
@example(2**40)
def test_fuzz_tfrecord_gzip_declared_length(length):
    # A record whose (CRC-valid) header declares any length, inside a tiny gzip stream.
    head = struct.pack("<Q", length)
    data = gzip.compress(head + struct.pack("<I", masked_crc32c(head)) + b"abc", mtime=0)
    result = _in_file(data, "r.tfrecord.gz", _read_tf, "GZIP")
    assert isinstance(result, Deep500Error) or length <= 3


@given(st.binary(max_size=400))
def test_fuzz_parse_example_random_bytes(data):
    _outcome(parse_example, data)


@given(st.binary(max_size=600))
def test_fuzz_shard_random_bytes(data):
    _in_file(b"D5SHARD1" + data, "s.d5shard", _read_shard)


@given(_MUTATIONS)
def test_fuzz_shard_mutated(mutations):
    _in_file(_mutate(_SHARD, mutations), "s.d5shard", _read_shard)


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                 max_size=3), max_leaves=8)
_HEADER_KEYS = ["format", "version", "count", "record_size", "fields", "classes", "source", "record_checksum",
                "data_offset", "index_offset", "file_size", "quantization_max_error"]
_FIELD_KEYS = ["role", "node", "dtype", "shape", "offset", "divisor"]


def _with_header(header: dict) -> bytes:
    length = int.from_bytes(_SHARD[8:12], "little")
    body = json.dumps(header).encode()
    data_offset = 4096
    return (_SHARD[:8] + struct.pack("<II", len(body), zlib.crc32(body)) + body
            + b"\0" * max(0, data_offset - 16 - len(body)) + _SHARD[max(data_offset, 16 + length):])


@given(st.one_of(st.tuples(st.sampled_from(_HEADER_KEYS), st.none(), _JSON),
                 st.tuples(st.sampled_from(_FIELD_KEYS), st.integers(0, 1), _JSON)))
@example(("divisor", 0, 0))
@example(("classes", None, -3))
@example(("dtype", 0, "(2"))
@example(("shape", 0, [[[[[[[[1]]]]]]]]))
def test_fuzz_shard_header_fields(change):
    # Any JSON value in any header field, with a valid header CRC: only the schema stands in the way.
    key, field, value = change
    length = int.from_bytes(_SHARD[8:12], "little")
    header = json.loads(_SHARD[16:16 + length])
    (header["fields"][field] if field is not None else header)[key] = value
    result = _in_file(_with_header(header), "s.d5shard", _read_shard)
    if not isinstance(result, Deep500Error):
        assert len(result["input"]) == 5


_OPTION = st.one_of(st.integers(-3, 40), st.floats(-1, 2), st.none(), st.booleans(), st.text(max_size=3))


@given(st.fixed_dictionaries({}, optional={k: _OPTION for k in ("seq_len", "classes", "vocab_size", "train_size",
                                                                  "test_size", "signal", "seed")}))
@example({"seed": -1})  # was a raw numpy ValueError
@example({"seed": "a"})
def test_fuzz_synthetic_tokens_options(options):
    result = _outcome(datasets.load_dataset, "synthetic_tokens", "x", "y", **options)
    if not isinstance(result, Deep500Error):
        train, test = result
        batch = train[np.arange(len(train))]
        assert batch["x"].dtype == np.int64 and (batch["x"][:, 0] == 0).all()
        assert batch["y"].min() >= 0 and batch["y"].max() < options.get("classes", 2)


# ------------------------------------------------------------------------ writers and indexing
_ANY = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=8),
                              st.binary(max_size=8), st.complex_numbers(allow_nan=True)),
                    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner), max_leaves=8)


@given(st.dictionaries(st.one_of(st.text(max_size=6), st.integers(), st.binary(max_size=4)), _ANY, max_size=3)
       | _ANY)
def test_fuzz_serialize_example_any_value(features):
    out = _outcome(serialize_example, features)
    if isinstance(out, bytes):  # written: it reads back with the same feature names
        assert set(parse_example(out)) == set(features)


@given(st.lists(_ANY | st.binary(max_size=16), max_size=4) | _ANY)
def test_fuzz_write_tfrecord_any_records(records):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "w.tfrecord")
        out = _outcome(write_tfrecord, path, records)
        if not isinstance(out, Deep500Error):
            assert [bytes(r) for r in records] == list(read_tfrecord(path))


_SHARD_DATASET = None


def _shard_dataset():
    global _SHARD_DATASET
    if _SHARD_DATASET is None:
        folder = tempfile.mkdtemp()
        path = os.path.join(folder, "s.d5shard")
        with open(path, "wb") as f:
            f.write(_SHARD)
        _SHARD_DATASET = ShardDataset(path, "input", "label")
    return _SHARD_DATASET


@given(st.one_of(st.integers(-2**70, 2**70), st.floats(), st.text(max_size=4), st.none(), st.booleans(),
                 st.lists(st.one_of(st.integers(-10, 10), st.floats(-10, 10)), max_size=6),
                 st.builds(slice, st.one_of(st.none(), st.integers(-8, 8)), st.one_of(st.none(), st.integers(-8, 8))),
                 st.builds(np.array, st.lists(st.integers(-2**40, 2**40), max_size=4))))
def test_fuzz_shard_dataset_index(index):
    ds = _shard_dataset()
    out = _outcome(ds.__getitem__, index)
    if not isinstance(out, Deep500Error):
        assert set(out) == {"input", "label"}
        assert np.ndim(out["label"]) in (0, 1) and np.ndim(out["input"]) == np.ndim(out["label"]) + 3
