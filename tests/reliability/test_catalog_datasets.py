"""Bad-input catalog, part B: dataset files (IDX, CIFAR, TFRecord, shards), dataset names and
options, ``DEEP500LITE_DATA``, ``deep500lite pack`` and ``deep500lite bench dataset``.

Each case makes one wrong input as a user would (a damaged or hand-edited file, a misspelled
name, a bad argument) and asserts the documented outcome: the exact Deep500Error subclass (API)
or exit status 2 with one clean line (CLI), naming the file/field/argument and the value received.
"""

from __future__ import annotations

import copy
import gzip
import json
import struct
import zlib

import numpy as np
import pytest
from catalog_support import api_error, cli_error

from deep500lite import datasets
from deep500lite.datasets import (parse_example, read_cifar_batch, read_idx, read_shard_header, read_tfrecord,
                                  verify_shard, write_shards, write_tfrecord)
from deep500lite.datasets.tfrecord import masked_crc32c
from deep500lite.errors import (CorruptFileError, ExampleParseError, MissingDatasetError, UserError,
                                UserTypeError)
from deep500lite.lv2.dataset import NumpyDataset


# ------------------------------------------------------------------------------------------ helpers
def _small_dataset(n=6, classes=3):
    x = np.linspace(0, 1, n * 4, dtype=np.float32).reshape(n, 1, 2, 2)
    return NumpyDataset(x, "input", np.arange(n, dtype=np.int64) % classes, "label")


def _shard(tmp, name="s.d5shard", mutate=None, body=None, declared=None):
    """A valid shard file, its header optionally mutated (or replaced by ``body``) with a valid CRC."""
    path = tmp / name
    write_shards(_small_dataset(), path, classes=3)
    if mutate is None and body is None and declared is None:
        return path
    raw = path.read_bytes()
    length = int.from_bytes(raw[8:12], "little")
    header = json.loads(raw[16:16 + length])
    if mutate is not None:
        header = copy.deepcopy(header)
        mutate(header)
    text = body if body is not None else json.dumps(header).encode()
    size = len(text) if declared is None else declared
    path.write_bytes(raw[:8] + struct.pack("<II", size, zlib.crc32(text)) + text
                     + b"\0" * max(0, header["data_offset"] - 16 - len(text)) + raw[header["data_offset"]:])
    return path


def _set(key, value, field=None):
    def mutate(header):
        (header["fields"][field] if field is not None else header)[key] = value
    return mutate


def _idx(path, type_byte, dims, data=b""):
    path.write_bytes(bytes([0, 0, type_byte, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + data)
    return path


def _mnist_folder(tmp, labels=None, n_labels=None):
    folder = tmp / "mnist"
    folder.mkdir()
    for split, n in (("train", 4), ("t10k", 2)):
        _idx(folder / f"{split}-images-idx3-ubyte", 8, (n, 28, 28), bytes(n * 784))
        lab = labels if labels is not None and split == "train" else bytes(range(n))
        count = n_labels if n_labels is not None and split == "train" else len(lab)
        _idx(folder / f"{split}-labels-idx1-ubyte", 8, (count,), lab[:count])
    return folder


def _tf_record(data: bytes, length=None) -> bytes:
    head = struct.pack("<Q", len(data) if length is None else length)
    return head + struct.pack("<I", masked_crc32c(head)) + data + struct.pack("<I", masked_crc32c(data))


def _read_all(path, compression=None):
    return list(read_tfrecord(path, compression))


# ------------------------------------------------------------------------------------ shard headers
def _case_shard(mutate=None, body=None, declared=None, expected=CorruptFileError, needles=()):
    def case(tmp):
        path = _shard(tmp, mutate=mutate, body=body, declared=declared)
        api_error(datasets.ShardDataset, path, "input", "label", expected=expected, needles=(str(path), *needles))
    return case


def _case_label_repacked_with_fresh_crc(tmp):
    # A wrong label written over a record, its CRC-32 recomputed: the CRCs all match, the label range does not.
    path = _shard(tmp)
    header = read_shard_header(path)
    raw = bytearray(path.read_bytes())
    start = header["data_offset"] + 2 * header["record_size"]
    raw[start + 16:start + 24] = struct.pack("<q", 7)
    record = bytes(raw[start:start + header["record_size"]])
    raw[header["index_offset"] + 8:header["index_offset"] + 12] = struct.pack("<I", zlib.crc32(record))
    path.write_bytes(bytes(raw))
    api_error(verify_shard, path, expected=CorruptFileError, needles=("record 2", "label", "7", "0..2"))


def _case_record_crc(tmp):
    path = _shard(tmp)
    raw = bytearray(path.read_bytes())
    raw[read_shard_header(path)["data_offset"] + 1] ^= 0xFF
    path.write_bytes(bytes(raw))
    api_error(verify_shard, path, expected=CorruptFileError, needles=(str(path), "record 0", "CRC-32"))


def _case_truncated_shard(tmp):
    path = _shard(tmp)
    path.write_bytes(path.read_bytes()[:-30])
    api_error(read_shard_header, path, expected=CorruptFileError, needles=(str(path), "truncated"))


def _case_bad_magic(tmp):
    path = _shard(tmp)
    path.write_bytes(b"NOTSHARD" + path.read_bytes()[8:])
    api_error(read_shard_header, path, expected=CorruptFileError, needles=(str(path), "magic", "NOTSHARD"))


def _case_header_crc(tmp):
    path = _shard(tmp)
    raw = bytearray(path.read_bytes())
    raw[20] ^= 0x01
    path.write_bytes(bytes(raw))
    api_error(read_shard_header, path, expected=CorruptFileError, needles=(str(path), "header CRC mismatch"))


def _case_shard_verify_not_bool(tmp):
    api_error(datasets.load_dataset, "shards", "x", "y", root=tmp, verify="yes", expected=UserError,
              needles=("verify", "'yes'"))


def _case_write_shards_classes_zero(tmp):
    api_error(write_shards, _small_dataset(), tmp / "a.d5shard", classes=0, expected=UserError,
              needles=("classes", "classes=0"))


def _case_write_shards_label_beyond_classes(tmp):
    api_error(write_shards, _small_dataset(classes=5), tmp / "a.d5shard", classes=3, expected=UserError,
              needles=("label", "0..2", "Received: label 4"))


# ---------------------------------------------------------------------------------------------- IDX
def _case_idx_overflow(tmp):
    path = _idx(tmp / "x-idx", 8, (2**32 - 1,) * 4)
    api_error(read_idx, path, expected=CorruptFileError, needles=(str(path), "4294967295", "Received"))


def _case_idx_beyond_memory(tmp):
    path = _idx(tmp / "x-idx", 0x0E, (60000, 60000, 60000), bytes(64))
    api_error(read_idx, path, expected=CorruptFileError, needles=(str(path), "60000", "1728000000000000"))


def _case_idx_bad_magic(tmp):
    path = tmp / "x-idx"
    path.write_bytes(b"\x89PNG\r\n\x1a\n")
    api_error(read_idx, path, expected=CorruptFileError, needles=(str(path), "magic", "0x89504E47"))


def _case_idx_truncated(tmp):
    path = _idx(tmp / "x-idx", 8, (3, 4), bytes(7))
    api_error(read_idx, path, expected=CorruptFileError, needles=(str(path), "[3, 4]", "truncated", "has 7"))


def _case_idx_gzip_truncated(tmp):
    path = tmp / "x-idx.gz"
    path.write_bytes(gzip.compress(bytes([0, 0, 8, 1]) + struct.pack(">I", 500) + bytes(500))[:-12])
    api_error(read_idx, path, expected=CorruptFileError, needles=(str(path), "gzip", "truncated"))


def _case_mnist_label_out_of_range(tmp):
    folder = _mnist_folder(tmp, labels=bytes([1, 2, 12, 3]))
    api_error(datasets.load_dataset, "mnist", "x", "y", root=folder, expected=CorruptFileError,
              needles=("train-labels-idx1-ubyte", "label 2 is 12", "0..9"))


def _case_mnist_count_mismatch(tmp):
    folder = _mnist_folder(tmp, n_labels=3)
    api_error(datasets.load_dataset, "mnist", "x", "y", root=folder, expected=CorruptFileError,
              needles=("train-labels-idx1-ubyte", "3 labels", "4 images"))


# -------------------------------------------------------------------------------------------- CIFAR
def _case_cifar_wrong_length(tmp):
    path = tmp / "data_batch_1.bin"
    path.write_bytes(bytes(3073 * 2 + 5))
    api_error(read_cifar_batch, path, 1, (10,), expected=CorruptFileError, needles=(str(path), "6151 bytes", "3073"))


def _case_cifar_empty(tmp):
    path = tmp / "test_batch.bin"
    path.write_bytes(b"")
    api_error(read_cifar_batch, path, 1, (10,), expected=CorruptFileError, needles=(str(path), "0 bytes"))


def _case_cifar_label_out_of_range(tmp):
    path = tmp / "data_batch_1.bin"
    path.write_bytes(bytes([3]) + bytes(3072) + bytes([10]) + bytes(3072))
    api_error(read_cifar_batch, path, 1, (10,), expected=CorruptFileError,
              needles=(str(path), "record 1 is 10", "0..9"))


def _case_cifar100_label_mode(tmp):
    api_error(datasets.load_dataset, "cifar100", "x", "y", root=tmp, label_mode="medium", expected=UserError,
              needles=("label_mode", "'coarse'", "'medium'"))


# ----------------------------------------------------------------------------------------- TFRecord
def _case_tfrecord_gzip_huge_record(tmp):
    path = tmp / "r.tfrecord.gz"
    path.write_bytes(gzip.compress(_tf_record(b"abc", length=2**40)))
    api_error(_read_all, path, "GZIP", expected=CorruptFileError, needles=(str(path), "record 0", "1099511627776"))


def _case_tfrecord_zlib_huge_record(tmp):
    path = tmp / "r.tfrecord.z"
    path.write_bytes(zlib.compress(_tf_record(b"abc", length=2**40)))
    api_error(_read_all, path, "ZLIB", expected=CorruptFileError, needles=(str(path), "record 0", "1099511627776"))


def _case_tfrecord_truncated(tmp):
    path = tmp / "r.tfrecord"
    write_tfrecord(path, [b"hello", b"world!"])
    path.write_bytes(path.read_bytes()[:-3])
    api_error(_read_all, path, expected=CorruptFileError, needles=(str(path), "truncated record 1"))


def _case_tfrecord_data_crc(tmp):
    path = tmp / "r.tfrecord"
    write_tfrecord(path, [b"hello"])
    raw = bytearray(path.read_bytes())
    raw[13] ^= 0x20
    path.write_bytes(bytes(raw))
    api_error(_read_all, path, expected=CorruptFileError, needles=(str(path), "data CRC mismatch in record 0"))


def _case_tfrecord_gzip_read_plain(tmp):
    path = tmp / "r.tfrecord"
    write_tfrecord(path, [b"hello"], compression="GZIP")
    api_error(_read_all, path, expected=CorruptFileError, needles=(str(path), "compression='GZIP'"))


def _case_tfrecord_plain_read_gzip(tmp):
    path = tmp / "r.tfrecord"
    write_tfrecord(path, [b"hello"])
    api_error(_read_all, path, "GZIP", expected=CorruptFileError, needles=(str(path), "GZIP stream is damaged"))


def _case_tfrecord_unknown_compression(tmp):
    path = tmp / "r.tfrecord"
    write_tfrecord(path, [b"hello"])
    api_error(read_tfrecord, path, "LZ4", expected=UserError, needles=("compression", "'GZIP'", "'LZ4'"))


def _case_tfrecord_folder(tmp):
    api_error(read_tfrecord, tmp, expected=UserError, needles=(str(tmp), "Received"))


def _case_example_garbage(tmp):
    api_error(parse_example, b"\x0a\xff\xff\xff\xff\x0f", expected=ExampleParseError,
              needles=("tf.train.Example", "field 1"))


# --------------------------------------------------------------------------- names, roots and options
def _case_misspelled_dataset(tmp):
    api_error(datasets.load_dataset, "mnsit", "x", "y", expected=UserError,
              needles=("Did you mean 'mnist'", "'cifar10'", "Received: 'mnsit'"))


def _case_data_env_is_file(tmp, monkeypatch):
    afile = tmp / "data.txt"
    afile.write_text("x")
    monkeypatch.setenv("DEEP500LITE_DATA", str(afile))
    api_error(datasets.load_dataset, "mnist", "x", "y", expected=UserError,
              needles=("DEEP500LITE_DATA", "is a file", str(afile)))


def _case_data_env_missing(tmp, monkeypatch):
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp / "nowhere"))
    api_error(datasets.load_dataset, "cifar10", "x", "y", expected=MissingDatasetError,
              needles=(str(tmp / "nowhere" / "cifar10" / "data_batch_1.bin"), "DEEP500LITE_DATA is set to",
                       "does not exist"))


def _case_root_is_file(tmp):
    afile = tmp / "train-images-idx3-ubyte"
    afile.write_bytes(b"")
    api_error(datasets.load_dataset, "mnist", "x", "y", root=afile, expected=UserError,
              needles=("root", "is a file", str(afile)))


def _case_root_not_a_path(tmp):
    api_error(datasets.load_dataset, "cifar10", "x", "y", root=10, expected=UserTypeError,
              needles=("root", "root=10"))


def _case_synthetic_beyond_memory(tmp):
    api_error(datasets.load_dataset, "synthetic", "x", "y", shape=(100_000, 100_000), expected=UserError,
              needles=("synthetic", "[100000, 100000]", "Received"))


def _case_tokens_beyond_memory(tmp):
    api_error(datasets.load_dataset, "synthetic_tokens", "x", "y", seq_len=10**7, train_size=10**6,
              expected=UserError, needles=("synthetic_tokens", "seq_len 10000000", "Received"))


def _case_seed_negative(tmp):
    api_error(datasets.load_dataset, "digits", "x", "y", seed=-1, expected=UserError, needles=("seed", "seed=-1"))


def _case_seed_string(tmp):
    api_error(datasets.load_dataset, "synthetic_tokens", "x", "y", seed="abc", expected=UserError,
              needles=("seed", "'abc'"))


def _case_unknown_option(tmp):
    api_error(datasets.load_dataset, "digits", "x", "y", colour=1, expected=UserError,
              needles=("colour", "test_fraction"))


def _case_separation_nan(tmp):
    api_error(datasets.load_dataset, "synthetic", "x", "y", separation=float("nan"), expected=UserError,
              needles=("separation", "nan"))


def _case_classes_bool(tmp):
    api_error(datasets.load_dataset, "synthetic", "x", "y", classes=True, expected=UserError,
              needles=("classes", "Received: True"))


def _image_folder(tmp, garbage=False):
    from PIL import Image

    for split in ("train", "val"):
        (tmp / "img" / split / "cat").mkdir(parents=True)
        Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp / "img" / split / "cat" / "0.png")
    if garbage:
        (tmp / "img" / "train" / "cat" / "1.png").write_bytes(b"not a png at all")
    return tmp / "img"


def _case_imagefolder_channels(tmp):
    api_error(datasets.load_dataset, "imagefolder", "x", "y", root=_image_folder(tmp), channels=2,
              expected=UserError, needles=("channels", "Received: 2"))


def _case_imagefolder_undecodable(tmp):
    train, _ = datasets.load_dataset("imagefolder", "x", "y", root=_image_folder(tmp, garbage=True))
    api_error(lambda: train[np.arange(2)], expected=CorruptFileError, needles=("1.png", "image"))


API_CASES = [
    pytest.param(_case_shard(_set("divisor", 0, field=0), needles=("fields[0].divisor", "Received: 0")),
                 id="shard-divisor-zero"),
    pytest.param(_case_shard(_set("classes", -3), needles=("'classes'", "Received: -3")), id="shard-classes-negative"),
    pytest.param(_case_shard(_set("dtype", "(2", field=0), needles=("fields[0].dtype", "'(2'")),
                 id="shard-dtype-unparsable"),
    pytest.param(_case_shard(_set("dtype", "O", field=0), needles=("fields[0].dtype", "'O'")),
                 id="shard-dtype-object"),
    pytest.param(_case_shard(_set("count", 10**30), needles=("'count'", str(10**30))), id="shard-count-astronomical"),
    pytest.param(_case_shard(_set("count", "6"), needles=("'count'", "'6'")), id="shard-count-a-string"),
    pytest.param(_case_shard(_set("record_size", 0), needles=("'record_size'", "Received: 0")),
                 id="shard-record-size-zero"),
    pytest.param(_case_shard(_set("shape", [-1, 2, 2], field=0), needles=("fields[0].shape[0]", "-1")),
                 id="shard-shape-negative"),
    pytest.param(_case_shard(_set("fields", []), needles=("'fields'", "[]")), id="shard-no-fields"),
    pytest.param(_case_shard(_set("role", "target", field=1), needles=("fields[1].role", "'target'")),
                 id="shard-role-unknown"),
    pytest.param(_case_shard(_set("offset", 10**6, field=1), needles=("fields[1]", "offset 1000000")),
                 id="shard-field-outside-record"),
    pytest.param(_case_shard(_set("index_offset", 5), needles=("index_offset 5",)), id="shard-offsets-disagree"),
    pytest.param(_case_shard(_set("version", 2), expected=UserError, needles=("version 2",)),
                 id="shard-format-version-2"),
    pytest.param(_case_shard(body=b"[" * 2000 + b"]" * 2000, needles=("nests too deeply",)),
                 id="shard-header-deeply-nested"),
    pytest.param(_case_shard(body=b'{"count": NaN}', needles=("not valid JSON", "NaN")), id="shard-header-nan"),
    pytest.param(_case_shard(body=b"\xff\xfe{}", needles=("not UTF-8", "0xFF")), id="shard-header-not-utf8"),
    pytest.param(_case_shard(body=b"[1, 2]", needles=("JSON object", "list")), id="shard-header-a-list"),
    pytest.param(_case_shard(body=b"{}", declared=2**31, needles=("2147483648-byte header",)),
                 id="shard-header-length-huge"),
    pytest.param(_case_record_crc, id="shard-record-crc-mismatch"),
    pytest.param(_case_label_repacked_with_fresh_crc, id="shard-wrong-label-with-fresh-crc"),
    pytest.param(_case_truncated_shard, id="shard-truncated"),
    pytest.param(_case_bad_magic, id="shard-bad-magic"),
    pytest.param(_case_header_crc, id="shard-header-crc-mismatch"),
    pytest.param(_case_shard_verify_not_bool, id="shards-verify-not-bool"),
    pytest.param(_case_write_shards_classes_zero, id="write-shards-classes-zero"),
    pytest.param(_case_write_shards_label_beyond_classes, id="write-shards-label-beyond-classes"),
    pytest.param(_case_idx_overflow, id="idx-dims-product-overflows"),
    pytest.param(_case_idx_beyond_memory, id="idx-dims-beyond-memory"),
    pytest.param(_case_idx_bad_magic, id="idx-bad-magic"),
    pytest.param(_case_idx_truncated, id="idx-truncated"),
    pytest.param(_case_idx_gzip_truncated, id="idx-gzip-truncated"),
    pytest.param(_case_mnist_label_out_of_range, id="mnist-label-out-of-range"),
    pytest.param(_case_mnist_count_mismatch, id="mnist-images-labels-count-mismatch"),
    pytest.param(_case_cifar_wrong_length, id="cifar-wrong-length"),
    pytest.param(_case_cifar_empty, id="cifar-empty-file"),
    pytest.param(_case_cifar_label_out_of_range, id="cifar-label-out-of-range"),
    pytest.param(_case_cifar100_label_mode, id="cifar100-label-mode-unknown"),
    pytest.param(_case_tfrecord_gzip_huge_record, id="tfrecord-gzip-2pow40-record"),
    pytest.param(_case_tfrecord_zlib_huge_record, id="tfrecord-zlib-2pow40-record"),
    pytest.param(_case_tfrecord_truncated, id="tfrecord-truncated"),
    pytest.param(_case_tfrecord_data_crc, id="tfrecord-data-crc-mismatch"),
    pytest.param(_case_tfrecord_gzip_read_plain, id="tfrecord-gzip-read-as-plain"),
    pytest.param(_case_tfrecord_plain_read_gzip, id="tfrecord-plain-read-as-gzip"),
    pytest.param(_case_tfrecord_unknown_compression, id="tfrecord-compression-unknown"),
    pytest.param(_case_tfrecord_folder, id="tfrecord-path-is-folder"),
    pytest.param(_case_example_garbage, id="example-not-protobuf"),
    pytest.param(_case_imagefolder_channels, id="imagefolder-channels-two"),
    pytest.param(_case_imagefolder_undecodable, id="imagefolder-image-undecodable"),
    pytest.param(_case_misspelled_dataset, id="dataset-name-misspelled"),
    pytest.param(_case_root_is_file, id="root-is-a-file"),
    pytest.param(_case_root_not_a_path, id="root-not-a-path"),
    pytest.param(_case_synthetic_beyond_memory, id="synthetic-shape-beyond-memory"),
    pytest.param(_case_tokens_beyond_memory, id="synthetic-tokens-beyond-memory"),
    pytest.param(_case_seed_negative, id="seed-negative"),
    pytest.param(_case_seed_string, id="seed-a-string"),
    pytest.param(_case_unknown_option, id="dataset-option-unknown"),
    pytest.param(_case_separation_nan, id="synthetic-separation-nan"),
    pytest.param(_case_classes_bool, id="synthetic-classes-bool"),
]


@pytest.mark.parametrize("case", API_CASES)
def test_catalog_datasets_api(case, tmp_path):
    case(tmp_path)


@pytest.mark.parametrize("case", [pytest.param(_case_data_env_is_file, id="data-env-is-a-file"),
                                  pytest.param(_case_data_env_missing, id="data-env-points-at-nothing")])
def test_catalog_datasets_env(case, tmp_path, monkeypatch):
    case(tmp_path, monkeypatch)


# ------------------------------------------------------------------------------------ CLI: pack, bench
def _damaged_shards(tmp):
    folder = tmp / "shards"
    for split in ("train", "test"):
        write_shards(_small_dataset(), folder / f"{split}.d5shard", classes=3)
    path = folder / "train.d5shard"
    raw = bytearray(path.read_bytes())
    raw[read_shard_header(path)["data_offset"] + 3] ^= 0x10
    path.write_bytes(bytes(raw))
    return folder


CLI_CASES = [
    pytest.param(lambda t: (("pack", "mnsit", t / "o"), ("Did you mean 'mnist'", "Received: 'mnsit'")),
                 id="pack-name-misspelled"),
    pytest.param(lambda t: (("pack", "digits", t / "afile"), ("OUT", "is a file")), id="pack-out-is-a-file"),
    pytest.param(lambda t: (("pack", "digits", t / "o", "--option", "seed=-1"), ("seed", "seed=-1")),
                 id="pack-option-seed-negative"),
    pytest.param(lambda t: (("pack", "digits", t / "o", "--batch-size", "0"), ("--batch-size", "'0'")),
                 id="pack-batch-size-zero"),
    pytest.param(lambda t: (("pack", "digits", t / "o", "--limit", "-4"), ("--limit", "'-4'")),
                 id="pack-limit-negative"),
    pytest.param(lambda t: (("pack", "digits", t / "o", "--image-size", "0x3"), ("--image-size", "'0x3'")),
                 id="pack-image-size-zero"),
    pytest.param(lambda t: (("pack", "digits", t / "o", "--option", "shape"), ("--option", "'shape'")),
                 id="pack-option-without-value"),
    pytest.param(lambda t: (("pack", "digits", t / "o", "--option", "test_fraction=2"), ("test_fraction", "2")),
                 id="pack-option-out-of-range"),
    pytest.param(lambda t: (("pack", "synthetic", t / "o", "--dtype", "uint8", "--option", "train_size=8",
                             "--option", "test_size=8"), ("image_dtype='uint8'", "[0, 1]", "Received")),
                 id="pack-uint8-for-unbounded-samples"),
    pytest.param(lambda t: (("pack", "synthetic", t / "o", "--option", "shape=[100000,100000]"),
                            ("synthetic", "[100000, 100000]", "Received")), id="pack-synthetic-beyond-memory"),
    pytest.param(lambda t: (("pack", _image_folder(t), t / "o", "--image-size", "100000x100000"),
                            ("--image-size", "Received: '100000x100000'")), id="pack-image-size-beyond-memory"),
    pytest.param(lambda t: (("pack", t, t / "o", "--root", t), ("--root", "already a folder")),
                 id="pack-root-with-folder-source"),
    pytest.param(lambda t: (("pack", t / "empty", t / "o"), ("holds no dataset", "nothing")),
                 id="pack-folder-without-dataset"),
    pytest.param(lambda t: (("pack", _damaged_shards(t), t / "o"), ("train.d5shard", "record 0", "CRC-32")),
                 id="pack-damaged-shard-source"),
    pytest.param(lambda t: (("bench", "dataset", "--max-time", "nan"), ("--max-time", "'nan'")),
                 id="bench-dataset-max-time-nan"),
    pytest.param(lambda t: (("bench", "dataset", "--max-time", "inf"), ("--max-time", "'inf'")),
                 id="bench-dataset-max-time-inf"),
    pytest.param(lambda t: (("bench", "dataset", "--max-time", "-1"), ("--max-time", "'-1'")),
                 id="bench-dataset-max-time-negative"),
    pytest.param(lambda t: (("bench", "dataset", "--samples", str(10**12), "--max-time", "0.1"),
                            ("--samples", "Received: '1000000000000'")), id="bench-dataset-samples-beyond-memory"),
    pytest.param(lambda t: (("bench", "dataset", "--shape", "100000,100000,100", "--max-time", "0.1"),
                            ("--shape", "Received: '100000,100000,100'")), id="bench-dataset-shape-beyond-memory"),
    pytest.param(lambda t: (("bench", "dataset", "--shape", "1,28"), ("--shape", "'1,28'")),
                 id="bench-dataset-shape-two-dims"),
    pytest.param(lambda t: (("bench", "dataset", "--dataset", "cifar-10"), ("Did you mean 'cifar10'", "'cifar-10'")),
                 id="bench-dataset-name-misspelled"),
    pytest.param(lambda t: (("bench", "dataset", "--dir", t / "afile", "--max-time", "0.1"), ("--dir", "is a file")),
                 id="bench-dataset-dir-is-a-file"),
    pytest.param(lambda t: (("bench", "dataset", "--json", t, "--max-time", "0.1"), ("--json", "is a folder")),
                 id="bench-dataset-json-is-a-folder"),
    pytest.param(lambda t: (("bench", "dataset", "--samples", "4", "--batch-size", "8", "--max-time", "0.1"),
                            ("batch_size 8", "4 samples", "--batch-size 8")), id="bench-dataset-batch-over-samples"),
]


@pytest.mark.parametrize("case", CLI_CASES)
def test_catalog_datasets_cli(case, tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "empty").mkdir()
    argv, needles = case(tmp_path)
    cli_error(*argv, needles=needles)
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir()), "files left after an error"
