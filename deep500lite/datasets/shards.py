"""The packed shard format: one file of fixed-size records, memory-mapped for random access.

Layout of a ``.d5shard`` file (all integers little-endian)::

    offset 0        8 bytes   magic b"D5SHARD1"
    offset 8        uint32    H, the length of the JSON header
    offset 12       uint32    CRC-32 (zlib) of the JSON header
    offset 16       H bytes   JSON header (UTF-8), then zero padding up to data_offset
    data_offset     count records of record_size bytes (data_offset is a multiple of 4096)
    index_offset    count uint32: the CRC-32 of each record (index_offset = data_offset + count * record_size)
    file_size       = index_offset + 4 * count

The header names the record's fields (``input`` then ``label``), each with its numpy dtype,
shape and byte offset inside the record; the record count and size; the offsets above; the
number of classes and where the samples came from. Because records have a fixed size, the
offset of sample ``i`` is ``data_offset + i * record_size``: the index is arithmetic and reading
a batch of random samples is one numpy fancy-indexing gather on a :class:`numpy.memmap`.

Opening a shard checks the magic number, the header CRC, the header against its JSON Schema
(:data:`deep500lite.datasets.schemas.SHARD_HEADER_SCHEMA`, with the ``jsonschema`` library, before
any value is used) and the file size (a truncated file is named as such); :func:`verify_shard` (or
``ShardDataset(..., verify=True)``, per batch read) checks the records against their CRC-32s.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import zlib

import numpy as np

from deep500lite.datasets.common import CorruptFileError, missing_file_error
from deep500lite.datasets.schemas import MAX_SHARD_HEADER_BYTES, SHARD_HEADER_SCHEMA
from deep500lite.errors import MissingDatasetError, UserError, UserIndexError, UserTypeError, format_choices
from deep500lite.input_files import input_path, open_input
from deep500lite.lv2.dataset import Dataset
from deep500lite.utils import check_schema

__all__ = ["SHARD_SUFFIX", "SHARD_MAGIC", "write_shards", "ShardDataset", "read_shard_header", "verify_shard",
           "shard_path", "IMAGE_DTYPES"]

SHARD_MAGIC = b"D5SHARD1"
SHARD_SUFFIX = ".d5shard"
FORMAT_VERSION = 1
IMAGE_DTYPES = (None, "uint8")
_PREFIX = 16
_ALIGN = 4096


def shard_path(root: str, split: str) -> str:
    """The file of one split in a folder of shards: ``root/<split>.d5shard``."""
    return os.path.join(root, split + SHARD_SUFFIX)


def _record_dtype(fields: list[dict], record_size: int) -> np.dtype:
    return np.dtype({"names": [f["role"] for f in fields],
                     "formats": [(np.dtype(f["dtype"]), tuple(f["shape"])) for f in fields],
                     "offsets": [f["offset"] for f in fields], "itemsize": record_size})


def _header_bytes(header: dict) -> bytes:
    return json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")


def write_shards(dataset: Dataset, path, batch_size: int = 1024, image_dtype: str | None = None,
                 classes: int | None = None, source: dict | None = None, limit: int | None = None,
                 progress=None) -> dict:
    """Write every sample of ``dataset``, in order, as one packed shard file.

    The file appears complete or not at all (written to a temporary file, then renamed).

    Args:
        dataset: any :class:`~deep500lite.Dataset` (its input, and its labels when it has a label node).
        path: the ``.d5shard`` file to write.
        batch_size: samples read from ``dataset`` at a time.
        image_dtype: None to store samples in their own dtype, or ``"uint8"`` to store float samples
            in [0, 1] as ``round(x * 255)`` (a quarter of the size of float32; exact for images that
            were uint8, like MNIST and CIFAR); they are read back as float32 ``q / 255``.
        classes: the number of classes, stored in the header (default: the dataset's ``classes``
            attribute, else the largest label + 1).
        source: a JSON-ready description of where the samples came from, stored in the header.
        limit: write only the first ``limit`` samples.
        progress: optional ``callable(done, total)`` called after each batch.

    Returns:
        The header written (a dict).

    Raises:
        UserError: an empty dataset, samples of varying shape or dtype, ``image_dtype="uint8"``
            for samples outside [0, 1], or a ``path`` that cannot be written.
    """
    if image_dtype not in IMAGE_DTYPES:
        raise UserError(f"image_dtype must be one of {format_choices(IMAGE_DTYPES)}. Received: {image_dtype!r}")
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise UserError(f"batch_size must be a positive integer. Received: {batch_size!r}")
    if limit is not None and (not isinstance(limit, (int, np.integer)) or isinstance(limit, bool)):
        raise UserError(f"limit must be None or a positive integer. Received: limit={limit!r}")
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise UserTypeError(f"write_shards takes a dataset (a d5.Dataset: len() and dataset[i]). Received: "
                            f"{type(dataset).__name__}")
    input_path(path, "write_shards's path")
    count = len(dataset) if limit is None else min(int(limit), len(dataset))
    if count < 1:
        raise UserError("Cannot write a shard of an empty dataset: give a dataset with samples, and limit None "
                        f"or >= 1. Received: {len(dataset)} samples, limit={limit!r}")
    path = os.fspath(path)
    roles = [("input", dataset.input_node)] + ([("label", dataset.label_node)] if dataset.label_node else [])
    first = dataset[np.arange(min(batch_size, count))]
    fields, offset = [], 0
    for role, node in roles:
        arr = np.asarray(first[node])
        dtype = arr.dtype
        if role == "input" and image_dtype == "uint8":
            dtype = np.dtype(np.uint8)
        if dtype.kind not in "biuf":
            raise UserError(f"Shards hold numeric samples (bool, int, uint or float); the dataset's {role} {node!r} "
                            f"has dtype {arr.dtype}. Received: {arr.dtype}")
        dtype = dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype
        field = {"role": role, "node": node, "dtype": dtype.str, "shape": list(arr.shape[1:]), "offset": offset}
        if role == "input" and image_dtype == "uint8":
            field["divisor"] = 255
        fields.append(field)
        offset += dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    record_size = max(offset, 1)
    rec_dtype = _record_dtype(fields, record_size)
    if classes is not None and (isinstance(classes, bool) or not isinstance(classes, (int, np.integer))
                                or classes < 1):
        raise UserError(f"classes must be None or a positive integer. Received: classes={classes!r}")
    if classes is None:
        classes = getattr(dataset, "classes", None)
        classes = classes if isinstance(classes, (int, np.integer)) else None
    header = {"format": "deep500lite-shard", "version": FORMAT_VERSION, "count": count, "record_size": record_size,
              "fields": fields, "classes": None if classes is None else int(classes), "source": source or {},
              "record_checksum": "crc32", "data_offset": 0, "index_offset": 0, "file_size": 0}
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SHARD_SUFFIX, dir=folder)
    except OSError as exc:
        raise UserError(f"Cannot write the shard file '{path}': {exc.strerror or exc}; its folder must be "
                        f"writable. Received: {path!r}") from exc
    crcs = np.empty(count, dtype="<u4")
    max_label, quant_err = -1, 0.0
    try:
        with os.fdopen(fd, "wb") as f:
            # Reserve room for the header; it is written last, when the label range is known.
            reserve = _PREFIX + len(_header_bytes(header)) + 512
            data_offset = -(-reserve // _ALIGN) * _ALIGN
            f.seek(data_offset)
            done = 0
            while done < count:
                idx = np.arange(done, min(done + batch_size, count))
                batch = first if done == 0 and len(first[dataset.input_node]) == len(idx) else dataset[idx]
                records = np.zeros(len(idx), dtype=rec_dtype)
                for field, (role, node) in zip(fields, roles):
                    arr = np.asarray(batch[node])
                    expect = (len(idx), *field["shape"])
                    if arr.shape != expect:
                        raise UserError(f"Samples {idx[0]}..{idx[-1]}: {role} {node!r} has shape {list(arr.shape)}, "
                                        f"expected {list(expect)} like the first samples; a shard holds samples "
                                        f"of one shape. Received: {list(arr.shape)}")
                    if "divisor" in field:
                        if arr.size and (arr.min() < 0 or arr.max() > 1):
                            raise UserError(f"image_dtype='uint8' stores samples in [0, 1]; samples {idx[0]}.."
                                            f"{idx[-1]} range over [{arr.min():.4g}, {arr.max():.4g}]. Store them "
                                            "in their own dtype (image_dtype=None, CLI: --dtype keep). "
                                            f"Received: [{arr.min():.4g}, {arr.max():.4g}]")
                        q = np.rint(arr.astype(np.float64) * 255)
                        quant_err = max(quant_err, float(np.max(np.abs(q / 255 - arr), initial=0)))
                        arr = q.astype(np.uint8)
                    elif arr.dtype != np.dtype(field["dtype"]):
                        raise UserError(f"Samples {idx[0]}..{idx[-1]}: {role} {node!r} has dtype {arr.dtype}, "
                                        f"expected {np.dtype(field['dtype'])} like the first samples. "
                                        f"Received: {arr.dtype}")
                    if role == "label" and arr.size and arr.dtype.kind in "iu":
                        max_label = max(max_label, int(arr.max()))
                        known = header["classes"]
                        if arr.min() < 0 or (known is not None and max_label >= known):
                            wrong = int(arr.min()) if arr.min() < 0 else max_label
                            allowed = f"0..{known - 1}" if known is not None else ">= 0"
                            raise UserError(f"Samples {idx[0]}..{idx[-1]}: label {node!r} holds {wrong}, not a "
                                            f"class in {allowed}; the source data is damaged or classes is "
                                            f"wrong. Received: label {wrong}")
                    records[role] = arr
                rows = records.view(np.uint8).reshape(len(idx), record_size)
                crcs[done:done + len(idx)] = [zlib.crc32(r) for r in rows]
                f.write(records.tobytes())
                done += len(idx)
                if progress:
                    progress(done, count)
            index_offset = data_offset + count * record_size
            f.write(crcs.tobytes())
            if header["classes"] is None and max_label >= 0:
                header["classes"] = max_label + 1
            if image_dtype == "uint8":
                header["quantization_max_error"] = quant_err
            header.update(data_offset=data_offset, index_offset=index_offset, file_size=index_offset + 4 * count)
            body = _header_bytes(header)
            if _PREFIX + len(body) > data_offset:  # pragma: no cover - the reserve covers the added values
                raise RuntimeError("shard header outgrew its reserved space")
            f.seek(0)
            f.write(SHARD_MAGIC + np.array([len(body), zlib.crc32(body)], dtype="<u4").tobytes() + body)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return header


def _reject_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _parse_header(path: str, body: bytes) -> dict:
    """The header's JSON as a dict; anything else is a :class:`CorruptFileError`."""
    try:
        header = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise CorruptFileError(path, f"the header is not UTF-8 text (byte {exc.start} is 0x{body[exc.start]:02X}); "
                                     "a shard header is JSON", offset=_PREFIX + exc.start) from None
    except RecursionError:
        raise CorruptFileError(path, "the header is not a shard header: its JSON nests too deeply (a shard header "
                                     "is one object of plain fields)", offset=_PREFIX) from None
    except ValueError as exc:  # json.JSONDecodeError, NaN/Infinity, an integer of too many digits
        raise CorruptFileError(path, f"the header is not valid JSON ({str(exc)[:160]})", offset=_PREFIX) from None
    if not isinstance(header, dict):
        raise CorruptFileError(path, f"the header must be a JSON object. Received: a JSON "
                                     f"{type(header).__name__}", offset=_PREFIX)
    return header


def _check_fields(path: str, header: dict) -> None:
    """The rules of ``fields`` the schema cannot state: roles, extents inside the record, no overlap."""
    fields, record_size = header["fields"], header["record_size"]
    roles = [f["role"] for f in fields]
    if roles not in (["input"], ["input", "label"]):
        raise CorruptFileError(path, f"the header's fields must be [input] or [input, label], in that order. "
                                     f"Received: roles {roles}", offset=_PREFIX)
    end = 0
    for i, field in enumerate(fields):
        nbytes = np.dtype(field["dtype"]).itemsize * math.prod(field["shape"])
        if field["offset"] < end or field["offset"] + nbytes > record_size:
            raise CorruptFileError(path, f"field 'fields[{i}]' ({field['role']}, {field['dtype']}{field['shape']}, "
                                         f"{nbytes} bytes at offset {field['offset']}) does not lie inside the "
                                         f"{record_size}-byte record after the field before it. Received: offset "
                                         f"{field['offset']}", offset=_PREFIX)
        end = field["offset"] + nbytes
    label = fields[1] if len(fields) > 1 else None
    if label is not None and header.get("classes") is not None and np.dtype(label["dtype"]).kind not in "iub":
        raise CorruptFileError(path, f"the header names {header['classes']} classes, so its labels are class "
                                     f"indices of an integer dtype; field 'fields[1]' (label) declares "
                                     f"{label['dtype']!r}. Received: dtype {label['dtype']!r}", offset=_PREFIX)


def read_shard_header(path) -> dict:
    """Read and check the header of a shard file.

    Raises:
        CorruptFileError: bad magic number, header CRC mismatch, a header that is not JSON or does
            not match :data:`~deep500lite.datasets.schemas.SHARD_HEADER_SCHEMA` (the message names
            the field and the value), or a file size other than the header declares.
        MissingDatasetError: the file does not exist (a ``FileNotFoundError``).
        UserError: the file cannot be read (a folder, no permission).
    """
    path = input_path(path, "Shard file")
    f = open_input(path, "Shard file (a .d5shard file written by `deep500lite pack` or write_shards)",
                   missing=MissingDatasetError)
    size = os.fstat(f.fileno()).st_size
    with f:
        prefix = f.read(_PREFIX)
        if len(prefix) < _PREFIX:
            raise CorruptFileError(path, f"wrong length: {size} bytes, shorter than the {_PREFIX}-byte prefix of a "
                                         "shard file (truncated)")
        if prefix[:8] != SHARD_MAGIC:
            raise CorruptFileError(path, f"bad magic number {prefix[:8]!r}; a deep500lite shard starts with "
                                         f"{SHARD_MAGIC!r}", offset=0)
        length, crc = np.frombuffer(prefix, dtype="<u4", count=2, offset=8).tolist()
        if length > MAX_SHARD_HEADER_BYTES:
            raise CorruptFileError(path, f"the prefix declares a {length}-byte header; a shard header holds at most "
                                         f"{MAX_SHARD_HEADER_BYTES} bytes. Received: {length}", offset=8)
        if _PREFIX + length > size:
            raise CorruptFileError(path, f"wrong length: the prefix declares a {length}-byte header but the file "
                                         f"has {size} bytes (truncated)", offset=8)
        body = f.read(length)
    if zlib.crc32(body) != crc:
        raise CorruptFileError(path, f"header CRC mismatch (stored 0x{crc:08X}, computed 0x{zlib.crc32(body):08X}): "
                                     "the header's bytes changed after write_shards or `deep500lite pack` wrote "
                                     "them (damage, or an edit by hand); write the shard again", offset=_PREFIX)
    header = _parse_header(path, body)
    if header.get("version") != FORMAT_VERSION:
        raise UserError(f"Shard '{path}' has format version {header.get('version')!r}; this deep500lite reads "
                        f"version {FORMAT_VERSION}. Received: version {header.get('version')!r}")
    check_schema(header, SHARD_HEADER_SCHEMA, "the shard header",
                 error=lambda message: CorruptFileError(path, message, offset=_PREFIX))
    for key in ("count", "record_size", "data_offset", "index_offset", "file_size"):
        header[key] = int(header[key])  # JSON Schema counts 10.0 as an integer; numpy needs an int
    for field in header["fields"]:
        field["offset"], field["shape"] = int(field["offset"]), [int(d) for d in field["shape"]]
    _check_fields(path, header)
    count, record_size = header["count"], header["record_size"]
    data_offset, index_offset, expected = header["data_offset"], header["index_offset"], header["file_size"]
    if index_offset != data_offset + count * record_size or expected != index_offset + 4 * count:
        raise CorruptFileError(path, f"the header's offsets disagree with its record count and size: data_offset "
                                     f"{data_offset} + count {count} x record_size {record_size} must equal "
                                     f"index_offset, and index_offset + 4 x count must equal file_size. Received: "
                                     f"index_offset {index_offset}, file_size {expected}", offset=_PREFIX)
    if data_offset < _PREFIX + length:
        raise CorruptFileError(path, f"data_offset {data_offset} points inside the {length}-byte header; records "
                                     f"start after it. Received: data_offset {data_offset}", offset=_PREFIX)
    if size != expected:
        if size >= expected:
            what = f"{size - expected} extra bytes follow the index"
        elif size >= index_offset:
            what = f"truncated: {expected - size} bytes are missing, in the CRC index after the records"
        else:
            first = max(0, size - data_offset) // record_size
            what = f"truncated: {expected - size} bytes are missing, from record {first} on"
        raise CorruptFileError(path, f"wrong length: the header declares {count} records of {record_size} bytes "
                                     f"and an index, {expected} bytes in all, but the file has {size} ({what})",
                               offset=min(size, expected))
    return header


class ShardDataset(Dataset):
    """A packed shard file as a dataset; samples are read through a :class:`numpy.memmap`.

    A batch ``dataset[indices]`` gathers the records in one fancy-indexing read and returns
    ``{input_node: samples, label_node: labels}`` (samples stored as uint8 with a divisor come back
    as float32 ``q / divisor``).

    Args:
        path: the ``.d5shard`` file.
        input_node: the network input the samples feed.
        label_node: the network input the labels feed (ignored, like the labels, when None).
        verify: check every record read against its stored CRC-32.

    Attributes:
        header: the file's header (dict); ``header["classes"]`` is the number of classes.
    """

    def __init__(self, path, input_node: str, label_node: str | None = None, verify: bool = False):
        super().__init__(input_node, label_node)
        if not isinstance(verify, (bool, np.bool_)):
            raise UserError(f"verify must be True or False. Received: verify={verify!r}")
        self.path = input_path(path, "Shard file")
        self.header = read_shard_header(self.path)
        self.fields = {f["role"]: f for f in self.header["fields"]}
        if label_node is not None and "label" not in self.fields:
            raise UserError(f"Shard '{self.path}' holds no labels, so label_node={label_node!r} cannot be fed; "
                            f"pass label_node=None for a shard without labels. Received: label_node={label_node!r}")
        self.classes = self.header.get("classes")
        self.verify = verify
        self._dtype = _record_dtype(self.header["fields"], self.header["record_size"])
        self._records = np.memmap(self.path, dtype=self._dtype, mode="r", offset=self.header["data_offset"],
                                  shape=(self.header["count"],))
        self._array = self._records.view(np.ndarray)
        self._crcs = None

    def sample_shape(self) -> tuple:
        """The shape of one sample."""
        return tuple(self.fields["input"]["shape"])

    def _check(self, index, records) -> None:
        if self._crcs is None:
            self._crcs = np.memmap(self.path, dtype="<u4", mode="r", offset=self.header["index_offset"],
                                   shape=(self.header["count"],))
        positions = np.arange(len(self))[index].reshape(-1)
        rows = np.ascontiguousarray(records).view(np.uint8).reshape(len(positions), -1)
        for i, row in zip(positions.tolist(), rows):
            stored, computed = int(self._crcs[i]), zlib.crc32(row)
            if computed != stored:
                raise CorruptFileError(self.path, f"record {i} fails its CRC-32 check (stored 0x{stored:08X}, "
                                                  f"computed 0x{computed:08X})",
                                       offset=self.header["data_offset"] + i * self.header["record_size"])

    def __getitem__(self, index):
        index = _checked_index(index, len(self), self.path)
        if self.verify:
            self._check(index, self._array[index])
        batch = {}
        # Gathering each field from its strided view copies once (faster than gathering records).
        for role, node in (("input", self.input_node), ("label", self.label_node)):
            if node is None:
                continue
            arr = self._array[role][index]
            if not arr.flags.writeable:  # a view into the read-only map (slice or integer index)
                arr = np.array(arr)
            if "divisor" in self.fields[role]:
                arr = arr.astype(np.float32) / np.float32(self.fields[role]["divisor"])
            batch[node] = arr
        return batch

    def __len__(self):
        return self.header["count"]


def _checked_index(index, count: int, path: str):
    """``index`` as numpy takes it, checked: an integer in ``-count .. count-1``, a slice, or a sequence
    or array of such integers (a boolean mask of ``count`` entries); anything else a :class:`UserIndexError`."""
    where = f"Shard '{path}' has {count:,} records (indices 0 to {count - 1:,}, or negative from the end)"
    if isinstance(index, slice):
        for part in (index.start, index.stop, index.step):
            if part is not None and (isinstance(part, bool) or not isinstance(part, (int, np.integer))):
                raise UserIndexError(f"{where}; a slice takes integers. Received: {index!r}")
        if index.step == 0:
            raise UserIndexError(f"{where}; a slice step cannot be 0. Received: {index!r}")
        return index
    if isinstance(index, (int, np.integer)) and not isinstance(index, (bool, np.bool_)):
        if not -count <= index < count:
            raise UserIndexError(f"{where}. Received: index {int(index):,}")
        return index
    if isinstance(index, (list, tuple, np.ndarray)):
        try:
            arr = np.asarray(index)
        except (ValueError, TypeError, OverflowError):
            arr = None
        if arr is not None and arr.dtype == np.bool_ and arr.shape == (count,):
            return arr
        if arr is not None and (arr.size == 0 or arr.dtype.kind in "iu") and arr.ndim == 1:
            arr = arr.astype(np.int64) if arr.size == 0 else arr
            bad = np.flatnonzero((arr < -count) | (arr >= count)) if arr.size else []
            if len(bad):
                raise UserIndexError(f"{where}. Received: index {int(arr[bad[0]]):,} at position {int(bad[0])}")
            return arr
        shown = repr(index)[:60]
        raise UserIndexError(f"{where}; an index is an integer, a slice, a 1-D list or array of integers, or a "
                             f"boolean mask of {count:,} entries. Received: {type(index).__name__} {shown}")
    raise UserIndexError(f"{where}; an index is an integer, a slice or a list of integers. Received: "
                         f"{type(index).__name__} {repr(index)[:60]}")


def verify_shard(path) -> int:
    """Check a whole shard file: header, size, every record against its CRC-32, and the labels' range.

    The CRC-32s prove that each record holds the bytes written for it (no damage since writing);
    they cannot tell a wrong value that was written with a fresh checksum. The one content check is
    that every integer label lies in ``0 .. classes - 1`` when the header names ``classes``.

    Returns:
        The number of records checked.

    Raises:
        CorruptFileError: the first fault found, naming the record and its byte offset.
    """
    ds = ShardDataset(path, "input", None, verify=True)
    label = ds.fields.get("label")
    classes = ds.header.get("classes")
    check_labels = label is not None and classes is not None and np.dtype(label["dtype"]).kind in "iu"
    step = max(1, (64 << 20) // ds.header["record_size"])
    for start in range(0, len(ds), step):
        records = ds._array[start:start + step]
        ds._check(slice(start, start + step), records)
        if check_labels:
            values = records["label"].reshape(len(records), -1)
            bad = np.flatnonzero(((values < 0) | (values >= classes)).any(axis=1))
            if len(bad):
                i = start + int(bad[0])
                raise CorruptFileError(ds.path, f"record {i} has label {values[bad[0]].tolist()}, outside the "
                                                f"header's classes 0..{classes - 1}; the shard was written from "
                                                f"damaged data. Received: label {values[bad[0]].tolist()}",
                                       offset=ds.header["data_offset"] + i * ds.header["record_size"])
    return len(ds)


def _open_split(root: str, split: str, input_node, label_node, root_given: bool, verify: bool) -> ShardDataset:
    path = shard_path(root, split)
    if not os.path.isfile(path):
        raise missing_file_error("shards", path, "make shard files from another dataset with `deep500lite pack "
                                 f"NAME_OR_DIR {root} --split both` (or deep500lite.datasets.write_shards).",
                                 root_given)
    return ShardDataset(path, input_node, label_node, verify=verify)
