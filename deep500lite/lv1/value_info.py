"""Deep500's view of a network's input and output nodes: name, element type and shape.

Deep500's ``model.get_input_nodes()`` returns node objects, read as ``node.name``,
``node.type.shape.shape`` (a list of dimensions) and ``node.type.type.to_numpy()`` (the numpy
type). :class:`ValueInfo` gives the same attributes and is at the same time the node's name (a
``str``), so code that treats ``get_input_nodes()`` as a list of names keeps working:

>>> node = ValueInfo.from_descriptor("x", TensorDescriptor(np.float32, (None, 3)))
>>> node == "x", node.name, node.type.shape.shape, node.type.type.to_numpy()
(True, 'x', [None, 3], <class 'numpy.float32'>)
"""

from __future__ import annotations

import enum

import numpy as np
import onnx

from deep500lite.errors import UserTypeError
from deep500lite.lv0.tensordesc import TensorDescriptor

__all__ = ["TensorDataType", "TensorShape", "TensorType", "ValueInfo"]

TensorDataType = enum.IntEnum("TensorDataType", {name: value for name, value
                                                 in onnx.TensorProto.DataType.items()})
TensorDataType.__doc__ = "ONNX's element types (``TensorProto.DataType``), with :meth:`to_numpy` and :meth:`from_numpy`."
TensorDataType.__module__ = __name__


def _to_numpy(self):
    """The numpy scalar type of this element type (e.g. ``numpy.float32``).

    Raises:
        UserTypeError: the element type has no numpy counterpart (UNDEFINED).
    """
    if self.value == 0:
        raise UserTypeError(f"The element type {self.name} has no numpy type. Received: {self.name}")
    return onnx.helper.tensor_dtype_to_np_dtype(int(self.value)).type


def _from_numpy(cls, dtype):
    """The element type of a numpy dtype.

    Raises:
        UserTypeError: ONNX has no element type for ``dtype``.
    """
    try:
        return cls(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserTypeError(f"ONNX has no element type for the numpy dtype {dtype!r}. "
                            f"Received: {dtype!r}") from exc


TensorDataType.to_numpy = _to_numpy
TensorDataType.from_numpy = classmethod(_from_numpy)


class TensorShape:
    """A tensor's shape as Deep500 gave it.

    Attributes:
        shape: the dimensions, a list (``None`` for a dimension known only at run time), or
            ``None`` when the rank is unknown.
    """

    def __init__(self, shape):
        self.shape = None if shape is None else list(shape)

    def __repr__(self) -> str:
        return f"TensorShape({self.shape})"


class TensorType:
    """A tensor's type as Deep500 gave it.

    Attributes:
        type: the element type (:class:`TensorDataType`; ``type.to_numpy()`` is the numpy type).
        shape: the :class:`TensorShape`.
    """

    def __init__(self, elem_type: TensorDataType, shape: TensorShape):
        self.type = elem_type
        self.shape = shape

    def __repr__(self) -> str:
        return f"TensorType({self.type.name}, {self.shape.shape})"


class ValueInfo(str):
    """An input or output node of a network: its name (the string itself), ``name`` and ``type``.

    Attributes:
        name: the tensor's name (equal to the string).
        type: a :class:`TensorType`, or ``None`` where the network declares no tensor type.
        doc_string: the ONNX doc string ("" when none).
    """

    name: str
    type: TensorType | None
    doc_string: str

    def __new__(cls, name: str, type: TensorType | None = None, doc_string: str = ""):  # noqa: A002 (Deep500's name)
        self = super().__new__(cls, name)
        self.name = str(name)
        self.type = type
        self.doc_string = doc_string
        return self

    @classmethod
    def from_descriptor(cls, name: str, desc: TensorDescriptor | None, doc_string: str = "") -> "ValueInfo":
        """The node ``name`` with the dtype and shape of ``desc`` (no type where ``desc`` is None)."""
        if desc is None:
            return cls(name, None, doc_string)
        return cls(name, TensorType(TensorDataType.from_numpy(desc.dtype), TensorShape(desc.shape)), doc_string)

    def __reduce__(self):
        return (ValueInfo, (self.name, self.type, self.doc_string))

    def __repr__(self) -> str:
        return f"ValueInfo({self.name!r}, {self.type!r})"
