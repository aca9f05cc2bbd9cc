"""Tensor descriptors: the dtype and shape of an operator's input or output."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from deep500lite.errors import UserError, UserTypeError

__all__ = ["TensorDescriptor", "tensordesc"]


@dataclasses.dataclass(frozen=True)
class TensorDescriptor:
    """The dtype and shape of a tensor.

    A dimension may be ``None`` when it is known only at run time; a descriptor made with
    :meth:`tensordesc.runtime_shape` has ``shape=None`` (any rank, any size).

    Attributes:
        dtype: a numpy dtype.
        shape: a tuple of ints (``None`` for a run-time dimension), or ``None``.
    """

    dtype: np.dtype
    shape: tuple | None

    def __post_init__(self):
        try:
            dtype = np.dtype(self.dtype)
        except TypeError as exc:
            raise UserTypeError(f"TensorDescriptor dtype must be a numpy dtype. Received: {self.dtype!r}") from exc
        object.__setattr__(self, "dtype", dtype)
        if self.shape is not None:
            try:
                shape = tuple(self.shape)
            except TypeError:
                raise UserTypeError("TensorDescriptor shape must be a list of dimensions (integers >= 0 or None), "
                                    f"or None. Received: shape={self.shape!r}") from None
            for d in shape:
                if d is not None and (not isinstance(d, (int, np.integer)) or d < 0):
                    raise UserError(
                        "TensorDescriptor dimensions must be integers >= 0 or None. "
                        f"Received: shape={list(self.shape)}"
                    )
            object.__setattr__(self, "shape", tuple(None if d is None else int(d) for d in shape))

    @property
    def is_static(self) -> bool:
        """Whether every dimension is known before run time."""
        return self.shape is not None and all(d is not None for d in self.shape)

    @property
    def rank(self) -> int | None:
        """Number of dimensions, or None when unknown."""
        return None if self.shape is None else len(self.shape)

    def matches(self, array: np.ndarray) -> bool:
        """Whether ``array`` has this descriptor's dtype and a compatible shape."""
        if array.dtype != self.dtype:
            return False
        if self.shape is None:
            return True
        return len(array.shape) == len(self.shape) and all(
            d is None or d == s for d, s in zip(self.shape, array.shape)
        )

    def value_info(self, name: str):
        """This descriptor as an ONNX ``ValueInfoProto`` named ``name`` (run-time dimensions as ``"?"``)."""
        import onnx

        shape = None if self.shape is None else [d if d is not None else "?" for d in self.shape]
        return onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(self.dtype), shape)

    def __str__(self) -> str:
        shape = "?" if self.shape is None else "x".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.dtype.name}[{shape}]"


def _is_dtype(value) -> bool:
    if isinstance(value, (list, tuple, int, np.integer)) or value is None:
        return False
    try:
        np.dtype(value)
    except TypeError:
        return False
    return True


class _TensorDescFactory:
    """``d5.tensordesc(dtype, shape)`` builds a :class:`TensorDescriptor` (Deep500's spelling).

    Deep500's ``order`` argument (``"NCHW"``, ``"NHWC"``) is accepted and not kept: descriptors
    carry no layout. The order of Deep500's README, ``d5.tensordesc(100, d5.float32)`` (shape
    first, an int for a vector), is read as ``d5.tensordesc(d5.float32, [100])``.
    """

    def __call__(self, dtype, shape: Sequence[int | None], order=None) -> TensorDescriptor:
        if not _is_dtype(dtype) and _is_dtype(shape):
            # Deep500's README wrote d5.tensordesc(100, d5.float32): shape first, a bare int.
            dtype, shape = shape, dtype
            if isinstance(shape, (int, np.integer)):
                shape = [shape]
        try:
            dims = tuple(shape)
        except TypeError:
            raise UserTypeError("d5.tensordesc shape must be a list of dimensions (integers >= 0 or None); for a "
                                "shape known only at run time use d5.tensordesc.runtime_shape(dtype). "
                                f"Received: shape={shape!r}") from None
        return TensorDescriptor(dtype, dims)

    @staticmethod
    def runtime_shape(dtype) -> TensorDescriptor:
        """A descriptor whose shape is known only at run time."""
        return TensorDescriptor(dtype, None)


tensordesc = _TensorDescFactory()
