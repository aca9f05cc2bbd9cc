"""TFRecord files and ``tf.train.Example`` messages, read and written without TensorFlow.

A TFRecord file is a sequence of records, each::

    uint64 length            (little-endian)
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

where ``masked_crc32c(b) = ((c >> 15) | (c << 17)) + 0xA282EAD8 (mod 2**32)`` with
``c = CRC-32C(b)`` (the Castagnoli polynomial, as in iSCSI). The whole file may be GZIP- or
ZLIB-compressed (``compression=``, as TensorFlow's ``compression_type``).

CRC-32C is computed here with a 256-entry table: a plain Python loop for short inputs, and for
long ones numpy runs the table loop over many chunks at once, then joins the chunk CRCs with the
linear "append L zero bytes" operator (CRC is linear over GF(2)), reaching tens of MB/s.

``tf.train.Example`` is decoded from the protobuf wire format directly::

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }      # entries: key = 1, value = 2
    Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed]; }    # packed or not: both are accepted
    Int64List { repeated int64 value = 1 [packed]; }
"""

from __future__ import annotations

import functools
import gzip
import io
import os
import struct
import zlib
from typing import Iterable, Iterator

import numpy as np

from deep500lite.datasets.common import CorruptFileError
from deep500lite.errors import ExampleParseError  # noqa: F401 - defined in errors, re-exported here
from deep500lite.errors import MissingDatasetError, UserError, UserTypeError, format_choices
from deep500lite.input_files import input_path, open_input
from deep500lite.options import Flag, short
from deep500lite.utils import check_allocation

__all__ = ["crc32c", "masked_crc32c", "read_tfrecord", "write_tfrecord", "parse_example", "serialize_example",
           "ExampleParseError", "COMPRESSIONS"]

COMPRESSIONS = (None, "GZIP", "ZLIB")
_POLY = 0x82F63B78  # CRC-32C (Castagnoli), bit-reflected
_MASK_DELTA = 0xA282EAD8
_VECTOR_MIN = 4096  # below this many bytes, the Python loop is faster than the numpy one
_READ_CHUNK = 1 << 24


def _make_table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(_POLY), t >> 1).astype(np.uint32)
    return t


_TABLE = _make_table()


@functools.lru_cache(maxsize=1)
def _word_tables() -> tuple[np.ndarray, np.ndarray]:
    """Tables ``lo[i]``, ``hi[i]``: the register after feeding 4 zero bytes from ``i`` and from ``i << 16``.

    Feeding a little-endian 32-bit word ``w`` to register ``r`` gives ``lo[x & 0xFFFF] ^ hi[x >> 16]``
    with ``x = r ^ w`` (the update is linear), four bytes per step.
    """
    i = np.arange(1 << 16, dtype=np.uint32)
    reg = np.concatenate([i, i << 16])
    for _ in range(4):
        reg = _TABLE[reg & 0xFF] ^ (reg >> 8)
    return reg[:1 << 16], reg[1 << 16:]


@functools.lru_cache(maxsize=1)
def _word_lists() -> tuple[list, list]:
    lo, hi = _word_tables()
    return lo.tolist(), hi.tolist()


def _update_python(reg: int, data) -> int:
    n4 = len(data) // 4
    if n4 > 2:
        lo, hi = _word_lists()
        for w in np.frombuffer(data, dtype="<u4", count=n4).tolist():
            x = reg ^ w
            reg = lo[x & 0xFFFF] ^ hi[x >> 16]
        data = data[4 * n4:]
    table = _TABLE_LIST
    for b in bytes(data):
        reg = table[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg


_TABLE_LIST = _TABLE.tolist()


@functools.lru_cache(maxsize=16)
def _zeros_operator(length: int) -> tuple:
    """Tables of the linear map ``reg -> register after feeding `length` zero bytes``, one per byte of reg."""
    reg = (np.arange(256, dtype=np.uint32)[None, :] << (np.arange(4, dtype=np.uint32)[:, None] * 8)).ravel()
    lo, hi = _word_tables()
    for _ in range(length // 4):
        reg = lo[reg & 0xFFFF] ^ hi[reg >> 16]
    return tuple(reg.reshape(4, 256).tolist())


def _update_numpy(reg: int, buf: np.ndarray) -> int:
    n = len(buf)
    # Chunk length (bytes, a power of two): near sqrt(n) balances the numpy loop (one pass per word
    # of a chunk) against the Python loop that joins the chunks (one step per chunk).
    chunk = 1 << max(6, min(16, int(round(np.log2(max(n, 1)) / 2))))
    count = n // chunk
    words = np.ascontiguousarray(buf[:count * chunk].view("<u4").reshape(count, chunk // 4).T)
    lo, hi = _word_tables()
    regs = np.zeros(count, dtype=np.uint32)
    x = np.empty(count, dtype=np.uint32)
    a = np.empty(count, dtype=np.uint32)
    for row in words:
        np.bitwise_xor(regs, row, out=x)
        np.right_shift(x, 16, out=regs)
        np.take(hi, regs, out=regs)
        np.bitwise_and(x, 0xFFFF, out=x)
        np.take(lo, x, out=a)
        np.bitwise_xor(regs, a, out=regs)
    t0, t1, t2, t3 = _zeros_operator(chunk)
    for u in regs.tolist():
        reg = t0[reg & 0xFF] ^ t1[(reg >> 8) & 0xFF] ^ t2[(reg >> 16) & 0xFF] ^ t3[reg >> 24] ^ u
    return _update_python(reg, buf[count * chunk:].tobytes())


def crc32c(data, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``value`` like :func:`zlib.crc32`.

    Args:
        data: bytes-like.
        value: the CRC of the preceding data (0 to start).

    Returns:
        The CRC as an unsigned 32-bit integer (``crc32c(b"123456789") == 0xE3069283``).
    """
    reg = (value ^ 0xFFFFFFFF) & 0xFFFFFFFF
    view = memoryview(data).cast("B")
    if len(view) < _VECTOR_MIN:
        reg = _update_python(reg, view)
    else:
        reg = _update_numpy(reg, np.frombuffer(view, dtype=np.uint8))
    return reg ^ 0xFFFFFFFF


def masked_crc32c(data) -> int:
    """The masked CRC-32C TFRecord stores: ``((c >> 15) | (c << 17)) + 0xA282EAD8`` mod 2**32."""
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def _check_compression(compression):
    key = compression.upper() if isinstance(compression, str) and compression else None
    if key not in COMPRESSIONS:
        raise UserError(f"TFRecord compression must be one of {format_choices(COMPRESSIONS)} (or ''). "
                        f"Received: {compression!r}")
    return key


class _ZlibReader(io.RawIOBase):
    """A readable stream of the decompressed content of a ZLIB-compressed file."""

    def __init__(self, f):
        self._f, self._z, self._buf = f, zlib.decompressobj(), bytearray()

    def readable(self):
        return True

    def read(self, n=-1):
        while (n < 0 or len(self._buf) < n) and not self._z.eof:
            chunk = self._f.read(1 << 20)
            if not chunk:
                if n < 0 or not self._buf:
                    raise EOFError("the zlib stream ends before its end-of-stream marker")
                break
            self._buf += self._z.decompress(chunk)
        n = len(self._buf) if n < 0 else min(n, len(self._buf))
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out


def read_tfrecord(path, compression: str | None = None, check_crc: bool = True) -> Iterator[bytes]:
    """Iterate over the records of a TFRecord file, checking each length and data CRC-32C.

    The arguments are checked at the call; the file is read as the iterator advances.

    Args:
        path: the file.
        compression: None (plain), ``"GZIP"`` or ``"ZLIB"``, as TensorFlow's ``compression_type``.
        check_crc: verify the masked CRC-32C of every length field and record.

    Returns:
        An iterator over each record's data (``bytes``).

    Raises:
        CorruptFileError: (while iterating) a truncated record, or a length or data CRC mismatch; the message names
            the file and the byte offset of the record (in the decompressed stream when compressed).
        MissingDatasetError: ``path`` does not exist (a ``FileNotFoundError``).
        UserTypeError: ``path`` is not a path, or ``check_crc`` is not a bool.
        UserError: ``path`` is a folder, a FIFO or a device, or cannot be read.
    """
    key = _check_compression(compression)
    check_crc = Flag().check(check_crc, "read_tfrecord: check_crc")
    path = input_path(path, "TFRecord file")
    with _open_tfrecord(path) as f:  # a missing or unreadable file is named here, not at the first record
        size = os.fstat(f.fileno()).st_size if key is None else None
    return _records(path, key, size, check_crc)


def _open_tfrecord(path: str):
    return open_input(path, "TFRecord file", missing=MissingDatasetError)


def _stream_fault(key: str, exc: Exception) -> str:
    """What is wrong with a damaged compressed stream, in words (zlib's reason without its error code)."""
    text = str(exc)
    if isinstance(exc, zlib.error) and ":" in text:
        text = "zlib: " + text.split(":", 1)[1].strip()
    return f"the {key} stream is damaged or truncated ({text})"


def _records(path: str, key, size, check_crc: bool) -> Iterator[bytes]:
    with _open_tfrecord(path) as raw:
        f = gzip.GzipFile(fileobj=raw) if key == "GZIP" else _ZlibReader(raw) if key == "ZLIB" else raw
        offset = index = 0
        while True:
            try:
                head = f.read(12)
                if not head:
                    return
                if len(head) < 12:
                    raise CorruptFileError(path, f"truncated record header: {len(head)} of its 12 bytes (length "
                                                 f"and length CRC) remain after record {index - 1}", offset)
                length, length_crc = struct.unpack("<QI", head)
                if check_crc and masked_crc32c(head[:8]) != length_crc:
                    hint = ("; the file starts with the gzip magic number: pass compression='GZIP'"
                            if offset == 0 and head[:2] == b"\x1f\x8b" else "")
                    raise CorruptFileError(path, f"length CRC mismatch in the header of record {index} (stored "
                                                 f"0x{length_crc:08X}, computed 0x{masked_crc32c(head[:8]):08X})"
                                                 f"{hint}", offset)
                if size is not None and offset + 16 + length > size:
                    raise CorruptFileError(path, f"truncated record {index}: its header declares {length} bytes "
                                                 f"of data plus a 4-byte CRC, only {size - offset - 12} bytes "
                                                 f"remain", offset)
                check_allocation(length + 4, f"record {index} of TFRecord file '{path}' (its header declares "
                                             f"{length} bytes of data)",
                                 error=lambda message: CorruptFileError(path, message, offset))
                body = _read_up_to(f, length + 4)
            except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
                raise CorruptFileError(path, f"{_stream_fault(key, exc)} near decompressed offset {offset}") from exc
            if len(body) < length + 4:
                raise CorruptFileError(path, f"truncated record {index}: its header declares {length} bytes of "
                                             f"data plus a 4-byte CRC, only {len(body)} bytes remain", offset)
            data = body[:length]
            if check_crc:
                stored, computed = int.from_bytes(body[length:], "little"), masked_crc32c(data)
                if stored != computed:
                    raise CorruptFileError(path, f"data CRC mismatch in record {index} ({length} bytes of data "
                                                 f"from offset {offset + 12}; stored 0x{stored:08X}, computed "
                                                 f"0x{computed:08X})", offset)
            yield data
            offset += 16 + length
            index += 1


def _read_up_to(f, n: int) -> bytes:
    """Up to ``n`` bytes of ``f``, read in bounded chunks, so a compressed stream that declares a huge
    record but holds little allocates only what it holds before the shortfall is seen."""
    if n <= _READ_CHUNK:
        return f.read(n)
    parts, left = [], n
    while left:
        chunk = f.read(min(left, _READ_CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def write_tfrecord(path, records: Iterable[bytes], compression: str | None = None) -> int:
    """Write records as a TFRecord file (readable by TensorFlow's ``tf.data.TFRecordDataset``).

    Args:
        path: the file to write.
        records: the records' data.
        compression: None, ``"GZIP"`` or ``"ZLIB"``.

    Returns:
        The number of records written.

    The file is written whole or not at all: records go to a temporary file beside ``path``,
    renamed to ``path`` after the last one, so a bad record leaves no half-written file.

    Raises:
        UserTypeError: ``path`` is not a path, ``records`` is not iterable, or a record is not
            bytes (a ``str`` must be encoded first).
        UserError: an unknown ``compression``, or a ``path`` that cannot be written.
    """
    import tempfile

    key = _check_compression(compression)
    path = input_path(path, "write_tfrecord: path")
    if isinstance(records, (bytes, bytearray, str)) or not hasattr(records, "__iter__"):
        raise UserTypeError(f"write_tfrecord: records must be an iterable of bytes (one bytes object per record). "
                            f"Received: {type(records).__name__}")
    n = 0
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    except OSError as exc:
        raise UserError(f"Cannot write TFRecord file '{path}': {exc.strerror or exc}; its folder must "
                        f"exist and be writable. Received: {path!r}") from exc
    try:
        with os.fdopen(fd, "wb") as raw:
            z = zlib.compressobj() if key == "ZLIB" else None
            f = gzip.GzipFile(fileobj=raw, mode="wb") if key == "GZIP" else raw
            try:
                for data in records:
                    data = _record_bytes(data, n)
                    head = struct.pack("<Q", len(data))
                    chunk = b"".join((head, struct.pack("<I", masked_crc32c(head)), data,
                                      struct.pack("<I", masked_crc32c(data))))
                    f.write(z.compress(chunk) if z else chunk)
                    n += 1
                if z:
                    f.write(z.flush())
            finally:
                if key == "GZIP":
                    f.close()
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise UserError(f"Cannot write TFRecord file '{path}': {exc.strerror or exc}; give a file in a "
                            f"writable folder. Received: {path!r}") from exc
        raise
    return n


def _record_bytes(data, index: int) -> bytes:
    """One record as bytes: ``bytes``, ``bytearray``, ``memoryview`` or a numpy array's raw bytes."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, np.ndarray):
        return data.tobytes()
    hint = " (encode it first: record.encode('utf-8'))" if isinstance(data, str) else ""
    raise UserTypeError(f"write_tfrecord: record {index} must be bytes{hint}. Received: {type(data).__name__} "
                        f"{repr(data)[:60]}")


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise ExampleParseError(f"Not a serialized tf.train.Example: a varint runs past the end of its "
                                    f"field at byte {pos}.")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ExampleParseError(f"Not a serialized tf.train.Example: a varint longer than 10 bytes ends at "
                                    f"byte {pos}.")


def _fields(buf: bytes, pos: int, end: int):
    """Yield ``(field number, wire type, value)``: an int for varints, a ``(start, stop)`` range otherwise."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
        elif wire in (1, 2, 5):
            if wire == 2:
                size, pos = _varint(buf, pos, end)
            else:
                size = 8 if wire == 1 else 4
            if pos + size > end:
                raise ExampleParseError(f"Not a serialized tf.train.Example: field {field} needs {size} bytes at "
                                        f"byte {pos}, only {end - pos} remain (truncated).")
            value = (pos, pos + size)
            pos += size
        else:
            raise ExampleParseError(f"Not a serialized tf.train.Example: wire type {wire} (field {field}) at byte "
                                    f"{pos}; Example uses only wire types 0, 1, 2 and 5.")
        yield field, wire, value


def _packed_varints(payload: bytes) -> np.ndarray:
    a = np.frombuffer(payload, dtype=np.uint8)
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    if a[-1] & 0x80:
        raise ExampleParseError("Not a serialized tf.train.Example: a packed int64 list ends inside a varint.")
    ends = np.flatnonzero(a < 0x80)
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if lengths.max() > 10:
        raise ExampleParseError("Not a serialized tf.train.Example: a packed int64 list holds a varint longer "
                                "than 10 bytes.")
    position = np.arange(len(a)) - np.repeat(starts, lengths)
    parts = (a & 0x7F).astype(np.uint64) << (position * 7).astype(np.uint64)
    return np.bitwise_or.reduceat(parts, starts).view(np.int64)


_KINDS = {1: "bytes_list", 2: "float_list", 3: "int64_list"}
_EMPTY = {1: lambda: np.array([], dtype=object), 2: lambda: np.zeros(0, np.float32),
          3: lambda: np.zeros(0, np.int64)}


def _decode_feature(buf: bytes, ranges: list) -> np.ndarray:
    kind, parts = None, []
    for start, stop in ranges:
        for field, wire, value in _fields(buf, start, stop):
            if field not in _KINDS:
                continue  # an unknown field: protobuf parsers skip it
            if wire != 2:
                raise ExampleParseError(f"Not a serialized tf.train.Example: Feature.{_KINDS[field]} has wire type "
                                        f"{wire}, expected 2 (a length-delimited message).")
            if field != kind:  # a oneof: setting another member clears the previous one
                kind, parts = field, []
            for f, w, v in _fields(buf, *value):
                if f != 1:
                    continue
                if kind == 1 and w == 2:
                    parts.append(bytes(buf[v[0]:v[1]]))
                elif kind == 2 and w == 2:
                    if (v[1] - v[0]) % 4:
                        raise ExampleParseError(f"Not a serialized tf.train.Example: a packed float list of "
                                                f"{v[1] - v[0]} bytes is not a whole number of 4-byte floats.")
                    parts.append(np.frombuffer(buf, dtype="<f4", count=(v[1] - v[0]) // 4, offset=v[0]))
                elif kind == 2 and w == 5:
                    parts.append(np.frombuffer(buf, dtype="<f4", count=1, offset=v[0]))
                elif kind == 3 and w == 2:
                    parts.append(_packed_varints(bytes(buf[v[0]:v[1]])))
                elif kind == 3 and w == 0:
                    parts.append(np.array([v - (1 << 64) if v >= (1 << 63) else v], dtype=np.int64))
                else:
                    raise ExampleParseError(f"Not a serialized tf.train.Example: {_KINDS[kind]}.value has wire type "
                                            f"{w}.")
    if kind is None:
        return np.zeros(0, np.float32)
    if kind == 1:
        out = np.empty(len(parts), dtype=object)
        out[:] = parts
        return out
    return np.concatenate(parts).astype(np.float32 if kind == 2 else np.int64) if parts else _EMPTY[kind]()


def parse_example(record) -> dict[str, np.ndarray]:
    """Decode a serialized ``tf.train.Example`` into numpy arrays, without TensorFlow.

    Args:
        record: the serialized message (e.g. a record from :func:`read_tfrecord`).

    Returns:
        ``{feature name: array}``: an object array of ``bytes`` for a ``bytes_list``, float32 for a
        ``float_list``, int64 for an ``int64_list`` (packed and unpacked encodings alike). A feature
        with no list set decodes as an empty float32 array.

    Raises:
        ExampleParseError: the bytes are not a valid ``tf.train.Example``.
    """
    if not isinstance(record, (bytes, bytearray, memoryview)):
        raise UserTypeError(f"parse_example takes the bytes of one serialized tf.train.Example (a record of "
                            f"read_tfrecord). Received: {type(record).__name__} {short(record)}")
    buf = bytes(record)
    entries: dict[str, list] = {}
    for field, wire, value in _fields(buf, 0, len(buf)):
        if field != 1:
            continue
        if wire != 2:
            raise ExampleParseError(f"Not a serialized tf.train.Example: Example.features has wire type {wire}, "
                                    "expected 2.")
        for f, w, entry in _fields(buf, *value):
            if f != 1:
                continue
            if w != 2:
                raise ExampleParseError(f"Not a serialized tf.train.Example: a Features map entry has wire type "
                                        f"{w}, expected 2.")
            key, ranges = b"", []
            for f2, w2, v2 in _fields(buf, *entry):
                if f2 == 1 and w2 == 2:
                    key = buf[v2[0]:v2[1]]
                elif f2 == 2 and w2 == 2:
                    ranges.append(v2)
            try:
                name = key.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ExampleParseError(f"Not a serialized tf.train.Example: a feature name is not UTF-8 "
                                        f"({key[:20]!r}).") from exc
            entries[name] = ranges  # a repeated map key: the last entry wins
    return {name: _decode_feature(buf, ranges) for name, ranges in entries.items()}


def _enc_varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _enc_field(field: int, payload: bytes) -> bytes:
    return _enc_varint(field << 3 | 2) + _enc_varint(len(payload)) + payload


def serialize_example(features: dict) -> bytes:
    """Serialize ``{name: values}`` as a ``tf.train.Example`` (the inverse of :func:`parse_example`).

    Args:
        features: each value is a sequence or array of ``bytes``/``str`` (a ``bytes_list``), of
            floats (a packed ``float_list``, stored as float32) or of integers or booleans (a packed
            ``int64_list``); a scalar is a list of one.

    Returns:
        The serialized message.

    Raises:
        UserTypeError: ``features`` is not a dict, or a name is not a string.
        UserError: a value of another kind: nested lists of different lengths (ragged), objects,
            integers outside int64, or a name that cannot be encoded as UTF-8.
    """
    if not isinstance(features, dict):
        raise UserTypeError(f"serialize_example: features must be a dict {{name: values}}. Received: "
                            f"{type(features).__name__}")
    entries = []
    for name, values in features.items():
        if not isinstance(name, str):
            raise UserTypeError(f"serialize_example: feature names must be strings. Received: {type(name).__name__} "
                                f"{repr(name)[:60]}")
        try:
            encoded_name = name.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"serialize_example: feature name {name!r} cannot be encoded as UTF-8 (it holds a lone "
                            f"surrogate). Received: {name!r}") from None
        entries.append(_enc_field(1, _enc_field(1, encoded_name) + _enc_field(2, _feature(name, values))))
    return _enc_field(1, b"".join(entries))


def _feature(name: str, values) -> bytes:
    """One ``Feature`` message: a ``bytes_list``, ``float_list`` or ``int64_list``."""
    if isinstance(values, (bytes, str)) or (isinstance(values, (int, float, bool, np.generic))):
        values = [values]  # a scalar is a list of one
    if isinstance(values, (list, tuple)) and len(values) and all(isinstance(v, (bytes, str, np.bytes_, np.str_))
                                                                for v in values):
        try:
            items = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values]
        except UnicodeEncodeError:
            raise UserError(f"Feature {name!r}: a string cannot be encoded as UTF-8 (it holds a lone surrogate). "
                            f"Received: {repr(values)[:60]}") from None
        return _enc_field(1, b"".join(_enc_field(1, v) for v in items))
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        arr = None
    if arr is None or arr.dtype.kind not in "fiub":
        what = "nested lists of different lengths (ragged)" if arr is None else f"dtype {arr.dtype}"
        raise UserError(f"Feature {name!r}: values must be a flat list or array of bytes/str, of floats or of "
                        f"integers in int64's range. Received: {what}: {repr(values)[:60]}")
    if arr.dtype.kind == "f":
        return _enc_field(2, _enc_field(1, arr.astype("<f4").ravel().tobytes()))
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) >= 2**63:
        raise UserError(f"Feature {name!r}: integers must fit in int64. Received: {int(arr.max())}")
    packed = b"".join(_enc_varint(int(v)) for v in arr.ravel())
    return _enc_field(3, _enc_field(1, packed))
