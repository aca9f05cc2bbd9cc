"""Deep500's ``d5.ops``: loss operations to append to a network, and the dtype names.

``network.add_operation(d5.ops.SoftmaxCrossEntropy([output, "label"], "loss"))`` appends the
loss as standard ONNX nodes, so every executor runs it and deep500lite's ONNX autodiff
differentiates it. Each loss takes Deep500's arguments, ``(input, output)``: the names
``[prediction, target]`` and the name of the scalar loss. Targets that the network does not
have yet become new graph inputs, with the descriptor in ``new_inputs``.

- :class:`MeanSquaredError`: ``mean((X - target) ** 2)`` over every element (Deep500's
  reference operator; the target is a float32 tensor of the prediction's shape).
- :class:`SoftmaxCrossEntropy`: softmax of the logits, then the mean negative log-likelihood of
  int64 class labels (one per sample).
- :class:`CrossEntropy`: ``-sum(target * log(X + 1e-9)) / N`` for probabilities ``X`` and
  one-hot (or soft) float32 targets of the same shape, ``N`` the batch size.
- :class:`LabelCrossEntropy`: the cross-entropy of int64 class labels. Deep500's ``d5.ops`` had
  no such class although its ``train_until`` sample appends one to ``simple_cnn``'s logits (the
  sample stopped there with an AttributeError); Deep500's reference operator of that name took
  probabilities, ``-sum(log(clip(X) + 1e-9)[label]) / N``. Here the class does what the sample
  meant on either: when ``X`` is the output of a ``Softmax`` node it is taken as probabilities
  (the reference operator's formula), otherwise as logits (softmax, then the same mean).

Deep500's ``d5.ops`` also held its ONNX object model (``OnnxModel``, one class per ONNX
operator); deep500lite works on ``onnx`` protobufs directly (``d5.Network``), so those are not
here.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv0.tensordesc import TensorDescriptor

__all__ = ["Loss", "MeanSquaredError", "SoftmaxCrossEntropy", "CrossEntropy", "LabelCrossEntropy",
           "bool_", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
           "uint8", "uint16", "uint32", "uint64"]

# Deep500's dtype names (d5.float32, ...): the numpy scalar types that descriptors take.
bool_, float16, float32, float64 = np.bool_, np.float16, np.float32, np.float64
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64


class Loss:
    """A loss appended to a network with ``network.add_operation(loss)``.

    Args:
        input: ``[prediction, target]`` tensor names.
        output: the name of the scalar loss.

    Attributes:
        input, output: as given (Deep500's names); also ``i_X``, ``i_target`` and ``o_output``.
        nodes: the ONNX nodes computing the loss.
        new_inputs: descriptors of the inputs the loss may add to the network (the target).
    """

    target_descriptor = TensorDescriptor(np.float32, None)

    def __init__(self, input: Sequence[str], output: str = "loss"):
        if isinstance(input, str) or not isinstance(input, Sequence) or len(input) != 2 or not all(
                isinstance(n, str) and n for n in input):
            raise UserTypeError(f"{type(self).__name__} takes input=[prediction, target]: two tensor names. "
                                f"Received: input={input!r}")
        if not isinstance(output, str) or not output:
            raise UserTypeError(f"{type(self).__name__} output must be the loss's name. Received: {output!r}")
        if input[0] == input[1] or output in input:
            raise UserError(f"{type(self).__name__} needs distinct prediction, target and output names. "
                            f"Received: input={list(input)!r}, output={output!r}")
        self.input, self.output = list(input), output
        self.i_X, self.i_target, self.o_output = input[0], input[1], output
        self.nodes = self._nodes(self.i_X, self.i_target, output)
        self.new_inputs = {self.i_target: self.target_descriptor}

    def _nodes(self, x: str, target: str, out: str) -> list:
        raise NotImplementedError

    def _name(self, suffix: str) -> str:
        return f"{self.o_output}_{type(self).__name__}_{suffix}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.input!r}, {self.output!r})"


class MeanSquaredError(Loss):
    """``mean((X - target) ** 2)`` over every element; the target is float32 with ``X``'s shape."""

    def _nodes(self, x, target, out):
        diff, sq = self._name("diff"), self._name("sq")
        shape, like = self._name("shape"), self._name("target")
        make = onnx.helper.make_node
        # The target is reshaped to the prediction's shape, so that shape inference (and the
        # autodiff that needs ranks) knows it without a declared target shape.
        return [make("Shape", [x], [shape], name=shape),
                make("Reshape", [target, shape], [like], name=like),
                make("Sub", [x, like], [diff], name=diff),
                make("Mul", [diff, diff], [sq], name=sq),
                make("ReduceMean", [sq], [out], name=self._name("mean"), keepdims=0)]


class SoftmaxCrossEntropy(Loss):
    """Softmax over the last axis of the logits, then the mean negative log-likelihood of int64 labels."""

    target_descriptor = TensorDescriptor(np.int64, (None,))

    def _nodes(self, x, target, out):
        return [onnx.helper.make_node("SoftmaxCrossEntropyLoss", [x, target], [out], name=self._name("sce"),
                                      reduction="mean")]


class CrossEntropy(Loss):
    """``-sum(target * log(X + 1e-9)) / N`` for probabilities ``X`` (N = size of axis 0, classes on the last)."""

    def _nodes(self, x, target, out):
        make, n = onnx.helper.make_node, self._name
        eps = onnx.numpy_helper.from_array(np.array(1e-9, np.float32))
        axes = onnx.numpy_helper.from_array(np.array([-1], np.int64))
        return [make("Constant", [], [n("eps")], name=n("eps"), value=eps),
                make("Add", [x, n("eps")], [n("shifted")], name=n("shifted")),
                make("Log", [n("shifted")], [n("log")], name=n("log")),
                make("Mul", [target, n("log")], [n("prod")], name=n("prod")),
                make("Constant", [], [n("axes")], name=n("axes"), value=axes),
                make("ReduceSum", [n("prod"), n("axes")], [n("per_sample")], name=n("per_sample"), keepdims=0),
                make("ReduceMean", [n("per_sample")], [n("mean")], name=n("mean"), keepdims=0),
                make("Neg", [n("mean")], [out], name=n("neg"))]


class LabelCrossEntropy(Loss):
    """The mean negative log-likelihood of int64 labels, on probabilities or logits.

    ``X`` produced by a ``Softmax`` node is read as probabilities (clipped to
    ``[1e-12, 1 - 1e-12]``, then ``-log(p + 1e-9)`` at the label, averaged over the batch, as
    Deep500's reference operator); any other ``X`` is read as logits (``SoftmaxCrossEntropyLoss``).
    Which one is decided when the loss is added to a network (``network.add_operation``); the
    ``nodes`` attribute alone holds the logits form.
    """

    target_descriptor = TensorDescriptor(np.int64, (None,))

    def _nodes(self, x, target, out):
        return [onnx.helper.make_node("SoftmaxCrossEntropyLoss", [x, target], [out], name=self._name("sce"),
                                      reduction="mean")]

    def _probability_nodes(self, x, target, out):
        make, n = onnx.helper.make_node, self._name
        const = onnx.numpy_helper.from_array
        return [make("Constant", [], [n("lo")], name=n("lo"), value=const(np.array(1e-12, np.float32))),
                make("Constant", [], [n("hi")], name=n("hi"), value=const(np.array(1.0 - 1e-12, np.float32))),
                make("Constant", [], [n("eps")], name=n("eps"), value=const(np.array(1e-9, np.float32))),
                make("Clip", [x, n("lo"), n("hi")], [n("clipped")], name=n("clipped")),
                make("Add", [n("clipped"), n("eps")], [n("shifted")], name=n("shifted")),
                make("Log", [n("shifted")], [n("log")], name=n("log")),
                make("NegativeLogLikelihoodLoss", [n("log"), target], [out], name=n("nll"), reduction="mean")]

    def nodes_for(self, graph) -> list:
        """The nodes for ``graph`` (an ``onnx.GraphProto``): the probability form when ``X`` is
        the output of a ``Softmax`` node in it, else the logits form."""
        producers = {o: node.op_type for node in graph.node for o in node.output}
        if producers.get(self.i_X) == "Softmax":
            return self._probability_nodes(self.i_X, self.i_target, self.o_output)
        return list(self.nodes)
