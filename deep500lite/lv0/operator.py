"""Level 0: the operator interface.

An operator maps numpy arrays to numpy arrays (``forward``) and propagates gradients back
(``backward``). The same object runs on every framework through
``deep500lite.frameworks.<fw>.custom_op(op)``.
"""

from __future__ import annotations

import abc
from typing import Sequence

import numpy as np

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv0.tensordesc import TensorDescriptor

__all__ = ["Operator", "CustomOp", "CustomPythonOp"]


class Operator(abc.ABC):
    """Base of all level-0 operators."""

    @abc.abstractmethod
    def forward(self, *inputs: np.ndarray):
        """Compute the outputs from the inputs.

        Args:
            *inputs: one numpy array per input descriptor, in order.

        Returns:
            One numpy array, or a tuple of them (one per output descriptor). The inputs must not be
            modified.
        """

    @abc.abstractmethod
    def backward(self, grads: Sequence[np.ndarray], fwd_inputs: Sequence[np.ndarray],
                 fwd_outputs: Sequence[np.ndarray]):
        """Compute the gradients of a scalar loss with respect to every input.

        Args:
            grads: the gradient of the loss with respect to each output, in output order.
            fwd_inputs: the inputs of the matching ``forward`` call.
            fwd_outputs: the outputs that call returned.

        Returns:
            One numpy array per input (a tuple when there are several), each with its input's
            shape and dtype.
        """

    def supports_cuda(self) -> bool:
        """Whether the operator has a CUDA implementation (only C++/CUDA operators do)."""
        return False


class CustomOp(Operator, abc.ABC):
    """An operator written by the user, with declared input and output descriptors.

    Args:
        input_descriptors: one :class:`TensorDescriptor` per input.
        output_descriptors: one :class:`TensorDescriptor` per output.
    """

    def __init__(self, input_descriptors: Sequence[TensorDescriptor],
                 output_descriptors: Sequence[TensorDescriptor]):
        for what, descs in (("input_descriptors", input_descriptors), ("output_descriptors", output_descriptors)):
            if not all(isinstance(d, TensorDescriptor) for d in descs):
                raise UserTypeError(
                    f"{what} must be a list of d5.tensordesc(...) values. Received: {list(descs)!r}"
                )
        self.input_descriptors = list(input_descriptors)
        self.output_descriptors = list(output_descriptors)

    def __call__(self, *inputs: np.ndarray) -> tuple:
        """Check the inputs against the descriptors, run ``forward`` and return a tuple of outputs."""
        if len(inputs) != len(self.input_descriptors):
            raise UserError(
                f"{type(self).__name__} takes {len(self.input_descriptors)} inputs. Received: {len(inputs)}"
            )
        for i, (x, d) in enumerate(zip(inputs, self.input_descriptors)):
            if not d.matches(np.asarray(x)):
                raise UserError(
                    f"{type(self).__name__} input {i} must be {d}. Received: "
                    f"{np.asarray(x).dtype.name}{list(np.shape(x))}"
                )
        out = self.forward(*inputs)
        return out if isinstance(out, tuple) else (out,)


class CustomPythonOp(CustomOp, abc.ABC):
    """A custom operator implemented in Python on numpy arrays (subclass it, as in Deep500)."""
