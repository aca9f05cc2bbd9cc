"""ONNX <-> JAX dtype tables and the numpy <-> JAX array conversion at the executor's boundary.

JAX computes in 32 bits unless ``jax_enable_x64`` is set: without it, a float64 or int64 array
given to JAX is silently narrowed to float32/int32. ONNX graphs use int64 for every shape, index
and label, and some models and conformance tests compute in float64, so importing this module
(which :mod:`deep500lite.frameworks.jax` does first) turns x64 on with
``jax.config.update("jax_enable_x64", True)``. Arrays keep their dtypes: a float32 model still
computes in float32 (the converters never widen), only values that ONNX declares 64-bit are
64-bit. This setting is global to the process (every JAX user in it sees 64-bit defaults, such as
``jnp.zeros(3)`` being float64).

``ONNX_TO_JAX_DTYPE`` maps ONNX ``TensorProto`` element types to the numpy dtypes JAX uses
(``jnp.bfloat16`` and the float8 types are ``ml_dtypes``' numpy dtypes, as in numpy). The 2- and
4-bit types (int4, uint4, int2, uint2, float4e2m1) and float8e8m0 are left out: JAX holds them, but
a compiled executable takes them only in a packed layout, and JAX's float-to-int4 casts saturate
where ONNX's wrap around.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402

from deep500lite.errors import UserTypeError  # noqa: E402

__all__ = ["ONNX_TO_JAX_DTYPE", "JAX_DTYPES", "SATURATING_FLOAT8", "onnx_to_jax_dtype", "host_array", "to_jax",
           "to_numpy", "as_dtype"]

ONNX_TO_JAX_DTYPE = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32),
    onnx.TensorProto.DOUBLE: np.dtype(np.float64),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
    onnx.TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    onnx.TensorProto.INT8: np.dtype(np.int8),
    onnx.TensorProto.INT16: np.dtype(np.int16),
    onnx.TensorProto.INT32: np.dtype(np.int32),
    onnx.TensorProto.INT64: np.dtype(np.int64),
    onnx.TensorProto.UINT8: np.dtype(np.uint8),
    onnx.TensorProto.UINT16: np.dtype(np.uint16),
    onnx.TensorProto.UINT32: np.dtype(np.uint32),
    onnx.TensorProto.UINT64: np.dtype(np.uint64),
    onnx.TensorProto.BOOL: np.dtype(np.bool_),
    onnx.TensorProto.COMPLEX64: np.dtype(np.complex64),
    onnx.TensorProto.COMPLEX128: np.dtype(np.complex128),
    onnx.TensorProto.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    onnx.TensorProto.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    onnx.TensorProto.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    onnx.TensorProto.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
}

#: The float8 types ONNX's ``Cast`` saturates to (``saturate=1``, the default).
SATURATING_FLOAT8 = frozenset(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                                     ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))

#: The numpy dtypes JAX arrays can hold.
JAX_DTYPES = frozenset(ONNX_TO_JAX_DTYPE.values())


def onnx_to_jax_dtype(elem_type: int) -> np.dtype:
    """The dtype of ONNX element type ``elem_type``.

    Raises:
        UserTypeError: JAX has no array type for it (strings, 2- and 4-bit types, float8 e8m0).
    """
    try:
        return ONNX_TO_JAX_DTYPE[elem_type]
    except KeyError:
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() \
            else str(elem_type)
        raise UserTypeError(f"JAX has no array type for ONNX element type {name}; it takes "
                            f"{sorted(onnx.TensorProto.DataType.Name(t) for t in ONNX_TO_JAX_DTYPE)}. "
                            f"Received: {name}") from None


def host_array(value) -> np.ndarray:
    """``value`` as a numpy array JAX can take (native byte order), without a copy when it already is one.

    A compiled executable takes such arrays directly and copies them to its device itself, which
    is faster than ``jax.device_put`` for small feeds.

    Raises:
        UserTypeError: JAX has no array type for the array's dtype (strings, objects).
    """
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.dtype not in JAX_DTYPES:
        raise UserTypeError(f"JAX has no array type for numpy dtype {arr.dtype}; JAX takes numeric and bool "
                            f"arrays. Received: an array of dtype {arr.dtype}")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def to_jax(value, device) -> jax.Array:
    """A numpy array as a JAX array on ``device`` (a ``jax.Device``); always a copy owned by JAX.

    Raises:
        UserTypeError: JAX has no array type for the array's dtype (strings, objects).
    """
    return jax.device_put(host_array(value), device)


def to_numpy(value) -> np.ndarray:
    """A JAX (or numpy) array as a numpy array that owns its memory (a copy from the device)."""
    if isinstance(value, np.ndarray):
        return value
    return np.array(value)


def as_dtype(dtype) -> np.dtype:
    """``dtype`` (numpy, JAX or a scalar type) as a numpy dtype."""
    return np.dtype(jnp.dtype(dtype))
