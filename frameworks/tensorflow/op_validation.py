"""Deep500's ``test_nativeop_forward`` and ``test_nativeop_gradient`` for TensorFlow operators.

Both work in the two modes TensorFlow has:

- graph mode (``tf.compat.v1.disable_v2_behavior()``, as Deep500's samples run): ``op(*inputs)``
  builds the graph once, one ``tf.compat.v1.Session`` initializes the variables and every
  measured run is one ``session.run`` of the outputs, as in Deep500;
- eager mode (TensorFlow 2's default): every measured run calls ``op(*inputs)``; outputs are
  read back (``.numpy()``) only after the runs.

Results follow Deep500's metric protocol and result list
(:mod:`deep500lite.lv0.validation.native`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from deep500lite.errors import UserTypeError
from deep500lite.lv0.operator import CustomOp
from deep500lite.lv0.tensordesc import TensorDescriptor
from deep500lite.lv0.validation.native import default_op_metrics, measure_outputs, numerical_gradients, run_with_metrics

__all__ = ["test_nativeop_forward", "test_nativeop_gradient", "desc_from_tensor", "custom_op_from_native"]


def _as_list(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _graph_mode() -> bool:
    return not tf.compat.v1.executing_eagerly()


def _check_inputs(inputs, name):
    if not isinstance(inputs, (list, tuple)):
        raise UserTypeError(f"{name} takes inputs as a list of TensorFlow tensors or variables. "
                            f"Received: {inputs!r:.200}")


def desc_from_tensor(tensor) -> TensorDescriptor:
    """The descriptor (numpy dtype and static shape) of a TensorFlow tensor or variable (Deep500's name)."""
    shape = tensor.shape.as_list() if tensor.shape.rank is not None else None
    return TensorDescriptor(tensor.dtype.as_numpy_dtype, shape)


def custom_op_from_native(op_class, inputs: Sequence[TensorDescriptor],
                          outputs: Sequence[TensorDescriptor]) -> CustomOp:
    """A TensorFlow function as a deep500lite operator on numpy arrays (Deep500's name).

    ``forward`` evaluates ``op_class(*tensors)`` on the arrays, eagerly or, in graph mode, in a
    session of its own graph; ``backward`` evaluates its gradient the same way.
    """

    def evaluate(arrays, grads=None):
        def build(xs):
            ys = _as_list(op_class(*xs))
            if grads is None:
                return ys
            return tf.gradients(ys, xs, grad_ys=[tf.constant(g) for g in grads])

        if not _graph_mode():
            xs = [tf.constant(a) for a in arrays]
            if grads is None:
                return [np.asarray(y) for y in build(xs)]
            with tf.GradientTape() as tape:
                for x in xs:
                    tape.watch(x)
                ys = _as_list(op_class(*xs))
            gs = tape.gradient(ys, xs, output_gradients=[tf.constant(g) for g in grads])
            return [np.zeros_like(a) if g is None else np.asarray(g) for g, a in zip(gs, arrays)]
        graph = tf.Graph()
        with graph.as_default():
            xs = [tf.constant(a) for a in arrays]
            ys = build(xs)
            with tf.compat.v1.Session(graph=graph) as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                outs = sess.run([y for y in ys if y is not None])
        it = iter(outs)
        return [np.zeros_like(a) if y is None else next(it) for y, a in zip(ys, arrays)] if grads is not None \
            else outs

    class NativeTensorFlowOp(CustomOp):
        def forward(self, *arrays):
            results = tuple(evaluate(list(arrays)))
            return results[0] if len(results) == 1 else results

        def backward(self, grads, fwd_inputs, fwd_outputs):
            results = tuple(evaluate(list(fwd_inputs), [np.asarray(g) for g in grads]))
            return results[0] if len(results) == 1 else results

    return NativeTensorFlowOp(inputs, outputs)


def test_nativeop_forward(op, inputs: Sequence, reference_outputs: Sequence, metrics: Sequence | None = None) -> list:
    """Run a TensorFlow operator on ``inputs`` and measure it with ``metrics`` (Deep500's signature).

    Args:
        op: a function of the input tensors (e.g. ``lambda a, b: tf.matmul(a, b)``).
        inputs: the inputs: ``tf.Variable`` or tensors (graph or eager).
        reference_outputs: one numpy array per output (``None`` where only timing is measured).
        metrics: ``TestMetric`` objects (default: ``L2Error``, ``MaxError``, ``WallclockTime``).

    Returns:
        For each output, the value of each metric, in order (e.g. ``l2, maxerr, times``).
    """
    _check_inputs(inputs, "test_nativeop_forward")
    metrics = default_op_metrics() if metrics is None else list(metrics)
    inputs = list(inputs)
    if _graph_mode():
        output_tensors = op(*inputs)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(output_tensors)  # warm-up
            outputs = run_with_metrics(lambda: sess.run(output_tensors), metrics, inputs)
            numpy_inputs = sess.run(inputs)
        outs = [np.asarray(o) for o in _as_list(outputs)]
    else:
        op(*inputs)  # warm-up
        outputs = run_with_metrics(lambda: op(*inputs), metrics, inputs)
        outs = [np.asarray(o) for o in _as_list(outputs)]
        numpy_inputs = [np.asarray(x) for x in inputs]
    return measure_outputs(metrics, numpy_inputs, outs, reference_outputs, "native inference")


def test_nativeop_gradient(op, inputs: Sequence, grad_inputs: Sequence | None = None, eps: float = 1e-5,
                           metrics: Sequence | None = None) -> list:
    """Compare a TensorFlow operator's gradient with central differences (Deep500's signature).

    The analytical gradient of ``sum_i <grad_inputs[i], op(*inputs)[i]>`` comes from
    ``tf.gradients`` (graph mode) or ``tf.GradientTape`` (eager); the numerical one from central
    differences with step ``eps``. Use float64 inputs for tight agreement.

    Args:
        op: a function of the input tensors.
        inputs: the inputs (``tf.Variable`` or tensors).
        grad_inputs: one numpy array per output, the gradient flowing in (default: ones).
        eps: the finite-difference step.
        metrics: ``TestMetric`` objects comparing analytical with numerical gradients.

    Returns:
        For each output, the value of each metric, in order.
    """
    _check_inputs(inputs, "test_nativeop_gradient")
    metrics = default_op_metrics() if metrics is None else list(metrics)
    inputs = list(inputs)
    if _graph_mode():
        outputs = _as_list(op(*inputs))
        weights = None if grad_inputs is None else [np.asarray(g) for g in grad_inputs]
        grad_tensors = tf.gradients(outputs, inputs, grad_ys=weights)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            grads = run_with_metrics(lambda: sess.run(grad_tensors), metrics, inputs)
            numpy_inputs, numpy_outputs = sess.run(inputs), sess.run(outputs)
    else:
        numpy_inputs = [np.asarray(x) for x in inputs]
        numpy_outputs = [np.asarray(o) for o in _as_list(op(*inputs))]
        weights = None if grad_inputs is None else [np.asarray(g) for g in grad_inputs]

        def analytical():
            xs = [tf.constant(a) for a in numpy_inputs]
            with tf.GradientTape() as tape:
                for x in xs:
                    tape.watch(x)
                ys = _as_list(op(*xs))
            return tape.gradient(ys, xs, output_gradients=None if weights is None else
                                 [tf.constant(w) for w in weights])

        grads = run_with_metrics(analytical, metrics, inputs)
    if weights is None:
        weights = [np.ones_like(o) for o in numpy_outputs]
    analytic = [np.zeros_like(x) if g is None else np.asarray(g) for g, x in zip(grads, numpy_inputs)]
    native = custom_op_from_native(op, [TensorDescriptor(x.dtype, x.shape) for x in numpy_inputs],
                                   [TensorDescriptor(o.dtype, o.shape) for o in numpy_outputs])
    numeric = numerical_gradients(lambda xs: _as_list(native.forward(*xs)), list(numpy_inputs), weights, eps)
    return measure_outputs(metrics, numpy_inputs, [analytic], [numeric], "native gradient")


test_nativeop_forward.__test__ = False  # library functions, not pytest tests
test_nativeop_gradient.__test__ = False
