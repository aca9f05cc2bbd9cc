"""The packed shard format: the bytes on disk follow the documented layout, values round-trip,
damage is named, and ``deep500lite pack`` writes shards from any dataset."""

import json
import os
import zlib

import numpy as np
import pytest

from support import run_cli
from deep500lite import datasets
from deep500lite.datasets import CorruptFileError, MissingDatasetError, ShardDataset, write_shards
from deep500lite.errors import UserError
from deep500lite.lv2.dataset import NumpyDataset
from test_datasets import make_image_folder, make_mnist


def _parse_layout(path):
    """Read a shard with plain file reads, following the layout in the shards module docstring."""
    raw = open(path, "rb").read()
    assert raw[:8] == b"D5SHARD1"
    length, crc = np.frombuffer(raw[8:16], "<u4").tolist()
    body = raw[16:16 + length]
    assert zlib.crc32(body) == crc
    return raw, json.loads(body)


@pytest.fixture
def arrays(rng):
    x = rng.standard_normal((37, 2, 3, 4)).astype(np.float32)
    y = rng.integers(0, 5, size=37).astype(np.int64)
    return x, y


def test_layout_on_disk(tmp_path, arrays):
    x, y = arrays
    path = tmp_path / "a.d5shard"
    write_shards(NumpyDataset(x, "in", y, "lab"), path, batch_size=8)
    raw, header = _parse_layout(path)
    assert header["count"] == 37 and header["record_size"] == 2 * 3 * 4 * 4 + 8
    assert header["data_offset"] % 4096 == 0 and len(raw) == header["file_size"]
    assert header["classes"] == int(y.max()) + 1
    assert [(f["role"], f["dtype"], f["shape"]) for f in header["fields"]] == [("input", "<f4", [2, 3, 4]),
                                                                                ("label", "<i8", [])]
    r, d = header["record_size"], header["data_offset"]
    crcs = np.frombuffer(raw[header["index_offset"]:], "<u4")
    for i in (0, 17, 36):
        record = raw[d + i * r:d + (i + 1) * r]
        assert record == x[i].astype("<f4").tobytes() + y[i].astype("<i8").tobytes()
        assert crcs[i] == zlib.crc32(record)


def test_round_trip_random_access(tmp_path, arrays, rng):
    x, y = arrays
    path = tmp_path / "a.d5shard"
    write_shards(NumpyDataset(x, "in", y, "lab"), path, batch_size=5)
    ds = ShardDataset(path, "input", "label")
    assert isinstance(ds._records, np.memmap)  # the fast path: a memory map, no read of the whole file
    assert len(ds) == 37 and ds.sample_shape() == (2, 3, 4) and ds.classes == int(y.max()) + 1
    idx = rng.permutation(37)[:11]
    batch = ds[idx]
    np.testing.assert_array_equal(batch["input"], x[idx])
    np.testing.assert_array_equal(batch["label"], y[idx])
    np.testing.assert_array_equal(ds[3:9]["input"], x[3:9])
    np.testing.assert_array_equal(ds[[4, 1]]["label"], y[[4, 1]])
    one = ds[5]
    np.testing.assert_array_equal(one["input"], x[5])
    assert one["label"] == y[5]
    batch["input"][0] += 1  # batches are writable copies, not views of the read-only map
    np.testing.assert_array_equal(ds[idx]["input"], x[idx])
    no_labels = ShardDataset(path, "input")
    assert list(no_labels[idx]) == ["input"]


def test_uint8_storage_is_exact_for_byte_images(tmp_path, rng):
    images = rng.integers(0, 256, size=(9, 1, 4, 4), dtype=np.uint8)
    src = datasets.UInt8ImageDataset(images, "x", rng.integers(0, 10, size=9), "y", classes=10)
    header = write_shards(src, tmp_path / "u.d5shard", image_dtype="uint8")
    assert header["classes"] == 10 and header["quantization_max_error"] < 1e-7
    assert os.path.getsize(tmp_path / "u.d5shard") == header["data_offset"] + 9 * (16 + 8) + 4 * 9
    got = ShardDataset(tmp_path / "u.d5shard", "x", "y")[np.arange(9)]
    assert got["x"].dtype == np.float32
    np.testing.assert_array_equal(got["x"], images.astype(np.float32) / 255)
    with pytest.raises(UserError, match=r"image_dtype='uint8' stores samples in \[0, 1\]"):
        write_shards(NumpyDataset(np.full((3, 2), 2.0, np.float32), "x", np.zeros(3, np.int64), "y"),
                     tmp_path / "bad.d5shard", image_dtype="uint8")
    assert not os.path.exists(tmp_path / "bad.d5shard")
    assert [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")] == []  # no leftovers


def _written(tmp_path, arrays):
    x, y = arrays
    path = tmp_path / "a.d5shard"
    header = write_shards(NumpyDataset(x, "in", y, "lab"), path)
    return path, header


def _patch(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_truncated_shard_is_named(tmp_path, arrays):
    path, header = _written(tmp_path, arrays)
    with open(path, "r+b") as f:
        f.truncate(header["file_size"] - 500)
    with pytest.raises(CorruptFileError) as err:
        ShardDataset(path, "x", "y")
    msg = str(err.value)
    assert str(path) in msg and "truncated: 500 bytes are missing" in msg
    with open(path, "r+b") as f:
        f.truncate(10)
    with pytest.raises(CorruptFileError, match="shorter than the 16-byte prefix"):
        ShardDataset(path, "x", "y")


def test_extra_bytes_bad_magic_and_header_crc(tmp_path, arrays):
    path, header = _written(tmp_path, arrays)
    with open(path, "ab") as f:
        f.write(b"\0" * 3)
    with pytest.raises(CorruptFileError, match="3 extra bytes follow the index"):
        ShardDataset(path, "x", "y")
    path, header = _written(tmp_path, arrays)
    _patch(path, 0, b"NOTSHARD")
    with pytest.raises(CorruptFileError, match=r"at byte offset 0: bad magic number b'NOTSHARD'"):
        ShardDataset(path, "x", "y")
    path, header = _written(tmp_path, arrays)
    _patch(path, 20, b"#")
    with pytest.raises(CorruptFileError, match=r"a.d5shard' at byte offset 16: header CRC mismatch"):
        ShardDataset(path, "x", "y")


def test_damaged_record_fails_its_crc(tmp_path, arrays):
    path, header = _written(tmp_path, arrays)
    record_start = header["data_offset"] + 21 * header["record_size"]
    raw = open(path, "rb").read()
    _patch(path, record_start + 7, bytes([raw[record_start + 7] ^ 0x40]))
    with pytest.raises(CorruptFileError) as err:
        datasets.verify_shard(path)
    assert f"at byte offset {record_start}: record 21 fails its CRC-32 check" in str(err.value)
    ds = ShardDataset(path, "x", "y", verify=True)
    ds[np.arange(20)]  # undamaged records read fine
    with pytest.raises(CorruptFileError, match="record 21 fails"):
        ds[[3, 21]]
    assert len(ShardDataset(path, "x", "y")[[21]]["x"]) == 1  # without verify, no check


def test_inconsistent_samples_are_refused(tmp_path):
    class Ragged(NumpyDataset):
        def __getitem__(self, index):
            batch = super().__getitem__(index)
            if np.max(index) >= 4:
                batch["x"] = batch["x"][:, :1]
            return batch

    ds = Ragged(np.zeros((8, 2), np.float32), "x", np.zeros(8, np.int64), "y")
    with pytest.raises(UserError, match=r"Samples 4..7: input 'x' has shape \[4, 1\], expected \[4, 2\]"):
        write_shards(ds, tmp_path / "r.d5shard", batch_size=4)
    with pytest.raises(UserError, match="empty dataset"):
        write_shards(NumpyDataset(np.zeros((0, 2)), "x"), tmp_path / "e.d5shard")


def test_load_dataset_shards_and_missing_split(tmp_path, arrays):
    x, y = arrays
    write_shards(NumpyDataset(x, "in", y, "lab"), tmp_path / "train.d5shard", classes=7)
    with pytest.raises(MissingDatasetError) as err:
        datasets.load_dataset("shards", "x", "y", root=tmp_path)
    assert str(tmp_path / "test.d5shard") in str(err.value) and "deep500lite pack" in str(err.value)
    write_shards(NumpyDataset(x[:5], "in", y[:5], "lab"), tmp_path / "test.d5shard", classes=7)
    train, test = datasets.load_dataset("shards", "x", "y", root=tmp_path)
    assert len(train) == 37 and len(test) == 5
    np.testing.assert_array_equal(test[np.arange(5)]["x"], x[:5])
    assert datasets.dataset_shape("shards", root=tmp_path) == (7, 2, 3, 4)


# -------------------------------------------------------------------------------- deep500lite pack


def _one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_pack_digits(tmp_path):
    proc = run_cli("pack", "digits", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "train: 1348 samples of float32[1, 8, 8] + int64 labels, 10 classes" in proc.stdout
    train, test = datasets.load_dataset("digits", "x", "y")
    packed_train, packed_test = datasets.load_dataset("shards", "x", "y", root=tmp_path / "out")
    for a, b in ((train, packed_train), (test, packed_test)):
        np.testing.assert_array_equal(a.data, b[np.arange(len(b))]["x"])
        np.testing.assert_array_equal(a.labels, b[np.arange(len(b))]["y"])


def test_pack_a_folder_named_like_a_dataset(tmp_path):
    """A folder called ``shards`` (what ``pack digits shards`` makes) next to the dataset name ``shards``."""
    assert run_cli("pack", "digits", "shards", cwd=tmp_path).returncode == 0
    _one_line_error(run_cli("pack", "shards", "again", cwd=tmp_path), "both a dataset name and a folder",
                    "./shards", "--root")
    assert not (tmp_path / "again").exists()
    proc = run_cli("pack", "./shards", "again", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "train: 1348 samples" in proc.stdout and (tmp_path / "again" / "train.d5shard").is_file()
    proc = run_cli("pack", "shards", "third", "--root", tmp_path / "shards", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "third" / "test.d5shard").is_file()


def test_pack_mnist_folder_as_uint8(tmp_path, rng):
    made = make_mnist(tmp_path / "mnist", rng, gz=True)
    proc = run_cli("pack", tmp_path / "mnist", tmp_path / "out", "--dtype", "uint8", "--split", "train")
    assert proc.returncode == 0, proc.stderr
    assert "train: 12 samples of uint8[1, 28, 28] (read as float32 / 255" in proc.stdout
    assert not os.path.exists(tmp_path / "out" / "test.d5shard")
    header = datasets.read_shard_header(tmp_path / "out" / "train.d5shard")
    assert header["source"]["dataset"] == "mnist" and header["record_size"] == 28 * 28 + 8
    got = ShardDataset(tmp_path / "out" / "train.d5shard", "x", "y")[np.arange(12)]
    np.testing.assert_array_equal(got["x"][:, 0], made["train"][0] / np.float32(255))
    np.testing.assert_array_equal(got["y"], made["train"][1])


def test_pack_image_folder_with_resize_and_options(tmp_path, rng):
    make_image_folder(tmp_path / "img", rng, sizes={("train", "dog", 0): (9, 9)})
    proc = run_cli("pack", tmp_path / "img", tmp_path / "out", "--image-size", "4x3", "--limit", "4")
    assert proc.returncode == 0, proc.stderr
    train = ShardDataset(tmp_path / "out" / "train.d5shard", "x", "y")
    expected = datasets.load_dataset("imagefolder", "x", "y", root=tmp_path / "img", image_size=(4, 3))[0]
    assert len(train) == 4 and train.classes == 3
    np.testing.assert_array_equal(train[np.arange(4)]["x"], expected[np.arange(4)]["x"])
    proc = run_cli("pack", "synthetic", tmp_path / "syn", "--option", "shape=[3,2,2]", "--option", "train_size=10",
                   "--option", "test_size=3")
    assert proc.returncode == 0, proc.stderr
    train, test = datasets.load_dataset("shards", "x", "y", root=tmp_path / "syn")
    assert len(train) == 10 and len(test) == 3 and train.sample_shape() == (3, 2, 2)


def test_pack_errors(tmp_path):
    _one_line_error(run_cli("pack", "imagenet21k", tmp_path / "o"), "NAME_OR_DIR must be a dataset name",
                    "'digits'", "Received: 'imagenet21k'")
    os.makedirs(tmp_path / "empty")
    _one_line_error(run_cli("pack", tmp_path / "empty", tmp_path / "o"), "holds no dataset deep500lite recognizes")
    _one_line_error(run_cli("pack", "mnist", tmp_path / "o", "--root", tmp_path / "empty"),
                    str(tmp_path / "empty" / "train-images-idx3-ubyte"), "downloads nothing")
    _one_line_error(run_cli("pack", "digits", tmp_path / "o", "--option", "colour=1"), "has no option(s) ['colour']")
    _one_line_error(run_cli("pack", "digits", tmp_path / "o", "--limit", "0"),
                    "argument --limit: must be a positive integer")


def test_missing_shard_file_and_unwritable_folder(tmp_path, arrays):
    with pytest.raises(MissingDatasetError, match="Shard file .*'.*nope.d5shard' does not exist") as err:
        datasets.read_shard_header(tmp_path / "nope.d5shard")
    assert isinstance(err.value, FileNotFoundError)
    with pytest.raises(UserError, match="Shard file .* is a folder, not a regular file"):
        ShardDataset(tmp_path, "x")
    (tmp_path / "file").write_text("x")
    ds = NumpyDataset(arrays[0], "x", arrays[1], "y")
    with pytest.raises(UserError, match="Cannot write the shard file '.*file/a.d5shard'"):
        write_shards(ds, tmp_path / "file" / "a.d5shard")
    with pytest.raises(UserError, match="limit must be None or a positive integer. Received: limit='3'"):
        write_shards(ds, tmp_path / "a.d5shard", limit="3")
