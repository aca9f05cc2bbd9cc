"""ONNX <-> torch dtype tables and the numpy <-> torch tensor conversion that uses them.

``ONNX_TO_TORCH_DTYPE`` maps ONNX ``TensorProto`` element types to torch dtypes (the converters'
``Cast`` and the torch custom operators both use it); :func:`to_torch` and :func:`to_numpy` move
arrays across the executor's boundary, including the dtypes numpy holds only through ``ml_dtypes``
(bfloat16, float8), moved as raw bits of the same width.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import torch

from deep500lite.errors import UserTypeError

__all__ = ["ONNX_TO_TORCH_DTYPE", "to_torch", "to_numpy"]

ONNX_TO_TORCH_DTYPE = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.INT16: torch.int16,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.UINT16: torch.uint16,
    onnx.TensorProto.UINT32: torch.uint32,
    onnx.TensorProto.UINT64: torch.uint64,
    onnx.TensorProto.BOOL: torch.bool,
    onnx.TensorProto.COMPLEX64: torch.complex64,
    onnx.TensorProto.COMPLEX128: torch.complex128,
    onnx.TensorProto.FLOAT8E4M3FN: torch.float8_e4m3fn,
    onnx.TensorProto.FLOAT8E4M3FNUZ: torch.float8_e4m3fnuz,
    onnx.TensorProto.FLOAT8E5M2: torch.float8_e5m2,
    onnx.TensorProto.FLOAT8E5M2FNUZ: torch.float8_e5m2fnuz,
}
_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz)


# numpy dtypes torch cannot take directly, moved as raw bits of the same width.
_BIT_VIEWS = {
    np.dtype(ml_dtypes.bfloat16): (np.uint16, torch.bfloat16),
    np.dtype(ml_dtypes.float8_e4m3fn): (np.uint8, torch.float8_e4m3fn),
    np.dtype(ml_dtypes.float8_e4m3fnuz): (np.uint8, torch.float8_e4m3fnuz),
    np.dtype(ml_dtypes.float8_e5m2): (np.uint8, torch.float8_e5m2),
    np.dtype(ml_dtypes.float8_e5m2fnuz): (np.uint8, torch.float8_e5m2fnuz),
}
_TORCH_BIT_VIEWS = {t: (torch.uint16 if n == np.uint16 else torch.uint8, d) for d, (n, t) in _BIT_VIEWS.items()}


def to_torch(value, device: torch.device) -> torch.Tensor:
    """A numpy array as a torch tensor on ``device`` (shares memory on the CPU when it can)."""
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    view = _BIT_VIEWS.get(arr.dtype)
    if view is not None:
        # np.ascontiguousarray makes a 0-d array 1-d: reshape back so a scalar stays a scalar
        t = torch.from_numpy(np.ascontiguousarray(arr).view(view[0]).reshape(arr.shape)).view(view[1])
    else:
        if arr.dtype == object or arr.dtype.kind in "SUV":
            raise UserTypeError(f"torch has no tensor type for numpy dtype {arr.dtype}; torch takes numeric and bool "
                                f"arrays. Received: an array of dtype {arr.dtype}")
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        elif not arr.flags.writeable or any(s < 0 for s in arr.strides):
            arr = np.array(arr)
        t = torch.from_numpy(arr)
    return t if device.type == "cpu" else t.to(device)


def to_numpy(t: torch.Tensor, copy: bool = False) -> np.ndarray:
    """A tensor as a numpy array: a copy if ``copy`` or the tensor is not in host memory."""
    t = t.detach()
    if t.device.type != "cpu":
        t, copy = t.cpu(), False
    if copy or not t.is_contiguous():
        t = t.clone(memory_format=torch.contiguous_format)
    view = _TORCH_BIT_VIEWS.get(t.dtype)
    if view is not None:
        return t.view(view[0]).numpy().view(view[1])
    return t.numpy()
