"""The JSON Schema of a shard file's header, and the numpy dtypes a shard field may have.

:func:`deep500lite.datasets.read_shard_header` validates every header against
:data:`SHARD_HEADER_SCHEMA` with the ``jsonschema`` library (through
:func:`deep500lite.utils.check_schema`) before any value in it is used, so a damaged or
hand-edited header (a divisor of 0, ``classes: -3``, a dtype string numpy would have to parse,
a count of ``1e30``) is refused with the field's path and the value received instead of
reaching numpy. The rules the schema cannot say (field extents inside the record, offsets that
agree with the count) are checked in :mod:`deep500lite.datasets.shards`.
"""

from __future__ import annotations

__all__ = ["SHARD_DTYPES", "SHARD_HEADER_SCHEMA", "MAX_SHARD_HEADER_BYTES"]

#: The dtype strings a shard field may hold: those :func:`~deep500lite.datasets.write_shards`
#: writes (bool, integers and floats, little-endian). Nothing else reaches ``np.dtype``.
SHARD_DTYPES = ("|b1", "|u1", "|i1", "<u2", "<i2", "<f2", "<u4", "<i4", "<f4", "<u8", "<i8", "<f8")

#: The largest header a shard may declare (a written header is well under a kilobyte).
MAX_SHARD_HEADER_BYTES = 1 << 20

_COUNT_LIMIT = 1 << 48  # records, and bytes of a record or offset: far beyond any real file
_SIZE = {"type": "integer", "minimum": 0, "maximum": _COUNT_LIMIT}

_FIELD = {
    "type": "object",
    "required": ["role", "node", "dtype", "shape", "offset"],
    "properties": {
        "role": {"enum": ["input", "label"]},
        "node": {"type": "string"},
        "dtype": {"enum": list(SHARD_DTYPES)},
        "shape": {"type": "array", "maxItems": 32, "items": {"type": "integer", "minimum": 0, "maximum": 1 << 31}},
        "offset": _SIZE,
        "divisor": {"type": "number", "exclusiveMinimum": 0, "maximum": 1 << 32},
    },
}

#: JSON Schema (draft 2020-12) of a shard header (see :mod:`deep500lite.datasets.shards` for the layout).
SHARD_HEADER_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["format", "version", "count", "record_size", "fields", "data_offset", "index_offset", "file_size"],
    "properties": {
        "format": {"const": "deep500lite-shard"},
        "version": {"type": "integer"},
        "count": {"type": "integer", "minimum": 1, "maximum": _COUNT_LIMIT},
        "record_size": {"type": "integer", "minimum": 1, "maximum": 1 << 40},
        "fields": {"type": "array", "minItems": 1, "maxItems": 2, "items": _FIELD},
        "classes": {"type": ["integer", "null"], "minimum": 1, "maximum": 1 << 31},
        "source": {"type": "object"},
        "record_checksum": {"const": "crc32"},
        "data_offset": {"type": "integer", "minimum": 16, "maximum": _COUNT_LIMIT},
        "index_offset": _SIZE,
        "file_size": _SIZE,
        "quantization_max_error": {"type": "number", "minimum": 0, "maximum": 1},
    },
}
