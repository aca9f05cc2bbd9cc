"""TFRecord files and tf.train.Example without TensorFlow, cross-checked against TensorFlow itself
where it is installed, and against hand-built bytes and a bit-by-bit CRC-32C everywhere."""

import gzip
import struct

import numpy as np
import pytest

from deep500lite.datasets import CorruptFileError, crc32c, masked_crc32c, parse_example, read_tfrecord
from deep500lite.datasets import serialize_example, write_tfrecord
from deep500lite.datasets.tfrecord import ExampleParseError
from deep500lite.errors import UserError


def crc32c_bitwise(data: bytes) -> int:
    """CRC-32C one bit at a time (reflected polynomial 0x82F63B78), as RFC 3720 B.4 defines it."""
    reg = 0xFFFFFFFF
    for byte in data:
        reg ^= byte
        for _ in range(8):
            reg = (reg >> 1) ^ (0x82F63B78 if reg & 1 else 0)
    return reg ^ 0xFFFFFFFF


def masked(c: int) -> int:
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_bytes(records) -> bytes:
    """A TFRecord stream built here: length, masked CRC of the length, data, masked CRC of the data."""
    out = b""
    for data in records:
        head = struct.pack("<Q", len(data))
        out += head + struct.pack("<I", masked(crc32c_bitwise(head))) + data
        out += struct.pack("<I", masked(crc32c_bitwise(data)))
    return out


def test_crc32c_known_values():
    # RFC 3720 (iSCSI), appendix B.4, and the classic check value.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C
    assert crc32c(b"") == 0


@pytest.mark.parametrize("n", [1, 3, 4, 7, 100, 4095, 4096, 5003, 40_000])
def test_crc32c_matches_bitwise_reference(rng, n):
    data = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
    assert crc32c(data) == crc32c_bitwise(data)
    cut = n // 3
    assert crc32c(data[cut:], crc32c(data[:cut])) == crc32c(data)  # continuation, like zlib.crc32
    assert masked_crc32c(data) == masked(crc32c_bitwise(data))


def test_read_records_built_here(tmp_path, rng):
    records = [b"", b"a", rng.integers(0, 256, size=9000, dtype=np.uint8).tobytes(), b"last record"]
    path = tmp_path / "r.tfrecord"
    path.write_bytes(tfrecord_bytes(records))
    assert list(read_tfrecord(path)) == records
    (tmp_path / "r.tfrecord.gz").write_bytes(gzip.compress(tfrecord_bytes(records)))
    assert list(read_tfrecord(tmp_path / "r.tfrecord.gz", compression="GZIP")) == records
    write_tfrecord(tmp_path / "w.tfrecord", records)
    assert (tmp_path / "w.tfrecord").read_bytes() == path.read_bytes()


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_write_read_round_trip(tmp_path, rng, compression):
    records = [rng.integers(0, 256, size=int(n), dtype=np.uint8).tobytes() for n in rng.integers(0, 3000, size=20)]
    path = tmp_path / "rt.tfrecord"
    assert write_tfrecord(path, records, compression=compression) == 20
    assert list(read_tfrecord(path, compression=compression)) == records


def _flip(path, offset):
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))


def test_corrupt_byte_gives_crc_error_with_file_and_offset(tmp_path):
    records = [b"first" * 10, b"second" * 20, b"third"]
    path = tmp_path / "c.tfrecord"
    path.write_bytes(tfrecord_bytes(records))
    second = 16 + 50  # offset of record 1: record 0 is 12 header bytes, 50 data bytes, 4 CRC bytes
    _flip(path, second + 12 + 33)  # a byte inside record 1's data
    reader = read_tfrecord(path)
    assert next(reader) == records[0]
    with pytest.raises(CorruptFileError) as err:
        next(reader)
    msg = str(err.value)
    assert str(path) in msg and f"at byte offset {second}: data CRC mismatch in record 1" in msg
    path.write_bytes(tfrecord_bytes(records))
    _flip(path, second + 2)  # a byte of record 1's length
    with pytest.raises(CorruptFileError, match=rf"at byte offset {second}: length CRC mismatch in the header of "
                                               r"record 1"):
        list(read_tfrecord(path))
    with pytest.raises(CorruptFileError, match="truncated record 1: its header declares 65656 bytes"):
        list(read_tfrecord(path, check_crc=False))  # unchecked, the damaged length runs past the end
    path.write_bytes(tfrecord_bytes(records))
    _flip(path, len(path.read_bytes()) - 1)  # record 2's data CRC itself
    with pytest.raises(CorruptFileError, match="data CRC mismatch in record 2"):
        list(read_tfrecord(path))
    assert list(read_tfrecord(path, check_crc=False)) == records


def test_truncated_file(tmp_path):
    raw = tfrecord_bytes([b"x" * 100, b"y" * 100])
    path = tmp_path / "t.tfrecord"
    path.write_bytes(raw[:-10])
    with pytest.raises(CorruptFileError, match=r"at byte offset 116: truncated record 1: its header declares 100 "
                                               r"bytes of data plus a 4-byte CRC, only 94 bytes remain"):
        list(read_tfrecord(path))
    path.write_bytes(raw[:116 + 5])
    with pytest.raises(CorruptFileError, match="truncated record header: 5 of its 12 bytes"):
        list(read_tfrecord(path))
    (tmp_path / "t.gz").write_bytes(gzip.compress(raw)[:-12])
    with pytest.raises(CorruptFileError, match=r"t.gz'.*GZIP stream is damaged or truncated"):
        list(read_tfrecord(tmp_path / "t.gz", compression="gzip"))
    (tmp_path / "t.gz").write_bytes(gzip.compress(raw))
    with pytest.raises(CorruptFileError, match="starts with the gzip magic number: pass compression='GZIP'"):
        list(read_tfrecord(tmp_path / "t.gz"))
    with pytest.raises(UserError, match=r"compression must be one of None, 'GZIP', 'ZLIB'.*Received: 'lz4'"):
        list(read_tfrecord(path, compression="lz4"))


# -------------------------------------------------------------------------------- tf.train.Example


def _field(number, wire, payload=b"", value=None):
    def varint(n):
        n &= (1 << 64) - 1
        out = b""
        while n >= 0x80:
            out += bytes([(n & 0x7F) | 0x80])
            n >>= 7
        return out + bytes([n])

    key = varint(number << 3 | wire)
    if wire == 0:
        return key + varint(value)
    if wire == 5:
        return key + payload
    return key + varint(len(payload)) + payload


def _example(features):
    """A serialized tf.train.Example from {name: serialized Feature}, built field by field here."""
    entries = b"".join(_field(1, 2, _field(1, 2, name.encode()) + _field(2, 2, feature))
                       for name, feature in features.items())
    return _field(1, 2, entries)


def test_parse_hand_built_example_packed_and_unpacked():
    ints = [0, 1, -1, 300, -(2 ** 63), 2 ** 63 - 1]
    floats = np.array([0.5, -2.25, 3e38], np.float32)
    record = _example({
        "packed_ints": _field(3, 2, _field(1, 2, b"".join(_field(1, 0, value=v)[1:] for v in ints))),
        "unpacked_ints": _field(3, 2, b"".join(_field(1, 0, value=v) for v in ints)),
        "packed_floats": _field(2, 2, _field(1, 2, floats.astype("<f4").tobytes())),
        "unpacked_floats": _field(2, 2, b"".join(_field(1, 5, f.tobytes()) for f in floats.astype("<f4"))),
        "strings": _field(1, 2, _field(1, 2, b"jpeg\x00bytes") + _field(1, 2, b"") + _field(1, 2, "ü".encode())),
        "empty_ints": _field(3, 2, b""),
        "unset": b"",
    })
    got = parse_example(record)
    for key in ("packed_ints", "unpacked_ints"):
        assert got[key].dtype == np.int64 and got[key].tolist() == ints
    for key in ("packed_floats", "unpacked_floats"):
        assert got[key].dtype == np.float32
        np.testing.assert_array_equal(got[key], floats)
    assert got["strings"].tolist() == [b"jpeg\x00bytes", b"", "ü".encode()]
    assert got["empty_ints"].dtype == np.int64 and got["empty_ints"].size == 0
    assert got["unset"].size == 0


def test_serialize_parse_round_trip():
    features = {"image": [b"\x89PNG..."], "label": [7], "bbox": [0.1, 0.2, 0.9, 1.0], "neg": np.array([-5, 2**40]),
                "name": "cat"}
    got = parse_example(serialize_example(features))
    assert got["image"].tolist() == [b"\x89PNG..."] and got["label"].tolist() == [7]
    np.testing.assert_array_equal(got["bbox"], np.array([0.1, 0.2, 0.9, 1.0], np.float32))
    assert got["neg"].tolist() == [-5, 2**40] and got["name"].tolist() == [b"cat"]
    with pytest.raises(UserError, match="values must be a flat list or array of bytes/str, of floats or of integers"):
        serialize_example({"c": [1 + 2j]})


@pytest.mark.parametrize("garbage,fragment", [
    (b"\x0a\x05\x0a\x03", "truncated"),
    (b"\x0b", "wire type 3"),
    (b"\x0a\x02\x0a\xff", "a varint runs past the end of its field"),
    (b"\x08" + b"\xff" * 11, "varint longer than 10 bytes"),
])
def test_malformed_example(garbage, fragment):
    with pytest.raises(ExampleParseError, match=fragment):
        parse_example(garbage)


# -------------------------------------------------------------------------------- against TensorFlow


@pytest.mark.requires("tensorflow")
@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_tensorflow_writer_our_reader_and_back(tmp_path, rng, compression):
    import tensorflow as tf

    records = [rng.integers(0, 256, size=int(n), dtype=np.uint8).tobytes()
               for n in [0, 1, 17, 5000, 120_000, 33]]
    path = str(tmp_path / "tf.tfrecord")
    options = tf.io.TFRecordOptions(compression_type=compression or "")
    with tf.io.TFRecordWriter(path, options) as w:
        for r in records:
            w.write(r)
    assert list(read_tfrecord(path, compression=compression)) == records
    ours = str(tmp_path / "ours.tfrecord")
    write_tfrecord(ours, records, compression=compression)
    back = [t.numpy() for t in tf.data.TFRecordDataset(ours, compression_type=compression or "")]
    assert back == records
    if compression is None:
        raw = bytearray(open(path, "rb").read())
        offset = 16 + 0 + 16 + 1 + 16 + 17  # record 3 starts after records of 0, 1 and 17 bytes
        raw[offset + 12 + 2500] ^= 0x80
        open(path, "wb").write(bytes(raw))
        with pytest.raises(CorruptFileError, match=rf"tf.tfrecord' at byte offset {offset}: data CRC mismatch in "
                                                   r"record 3 \(5000 bytes"):
            list(read_tfrecord(path))


@pytest.mark.requires("tensorflow")
def test_tensorflow_example_parsed_without_tensorflow(rng):
    import tensorflow as tf

    floats = rng.standard_normal(50).astype(np.float32)
    ints = rng.integers(-2**62, 2**62, size=40)
    example = tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"\x00\x01raw", b"second"])),
        "floats": tf.train.Feature(float_list=tf.train.FloatList(value=floats.tolist())),
        "ints": tf.train.Feature(int64_list=tf.train.Int64List(value=ints.tolist())),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
        "empty": tf.train.Feature(float_list=tf.train.FloatList(value=[])),
    }))
    got = parse_example(example.SerializeToString())
    assert got["image"].tolist() == [b"\x00\x01raw", b"second"]
    np.testing.assert_array_equal(got["floats"], floats)
    np.testing.assert_array_equal(got["ints"], ints)
    assert got["label"].tolist() == [3] and got["empty"].dtype == np.float32 and got["empty"].size == 0
    # TensorFlow's own parser agrees with what serialize_example writes.
    ours = serialize_example({"image": [b"\x00\x01raw", b"second"], "floats": floats, "ints": ints, "label": [3]})
    parsed = tf.io.parse_single_example(ours, {
        "image": tf.io.FixedLenFeature([2], tf.string), "floats": tf.io.FixedLenFeature([50], tf.float32),
        "ints": tf.io.FixedLenFeature([40], tf.int64), "label": tf.io.FixedLenFeature([], tf.int64)})
    assert parsed["image"].numpy().tolist() == [b"\x00\x01raw", b"second"]
    np.testing.assert_array_equal(parsed["floats"].numpy(), floats)
    np.testing.assert_array_equal(parsed["ints"].numpy(), ints)
    assert int(parsed["label"]) == 3
    # Unpacked encodings, hand-built, decode alike in TensorFlow and here.
    unpacked = _example({"u": _field(3, 2, b"".join(_field(1, 0, value=int(v)) for v in ints[:5])),
                         "f": _field(2, 2, b"".join(_field(1, 5, f.tobytes()) for f in floats[:3]))})
    tf_view = tf.train.Example.FromString(unpacked).features.feature
    assert parse_example(unpacked)["u"].tolist() == list(tf_view["u"].int64_list.value) == ints[:5].tolist()
    np.testing.assert_array_equal(parse_example(unpacked)["f"], np.array(tf_view["f"].float_list.value, np.float32))


def test_missing_or_unwritable_tfrecord_file_is_named(tmp_path):
    from deep500lite.datasets import MissingDatasetError

    for compression in (None, "GZIP"):
        with pytest.raises(MissingDatasetError, match="TFRecord file '.*nope.tfrecord' does not exist") as err:
            read_tfrecord(tmp_path / "nope.tfrecord", compression=compression)  # at the call, not the first record
        assert isinstance(err.value, FileNotFoundError)
    with pytest.raises(UserError, match="TFRecord file .* is a folder, not a regular file"):
        read_tfrecord(tmp_path)
    with pytest.raises(UserError, match="Cannot write TFRecord file '.*no-folder.*Received"):
        write_tfrecord(tmp_path / "no-folder" / "x.tfrecord", [b"x"])
