"""Custom operators as differentiable TensorFlow functions.

``custom_op(op)`` returns a function of tensors decorated with ``tf.custom_gradient``: the
forward pass runs the operator's ``forward`` through ``tf.numpy_function`` and the gradient its
``backward``, so it works eagerly and inside ``tf.function`` (the TensorFlow executor's graphs).

Memory: ``tf.numpy_function`` hands the operator numpy arrays on the host, so every call copies
its inputs out of TensorFlow and its results back in (and on a GPU, to and from the device).
TensorFlow has no zero-copy path for a Python- or ctypes-called kernel; a C++ operator without
this copy would have to be compiled as a TensorFlow custom op against TensorFlow's own headers,
which deep500lite does not do.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv0.custom import as_tuple, check_outputs, input_shape_for

__all__ = ["custom_op"]


def _shape(d):
    return None if d.shape is None else list(d.shape)


def _as_list(results) -> list:
    """``tf.numpy_function``'s results as a list: run eagerly it returns one tensor, not a list of one."""
    return list(results) if isinstance(results, (list, tuple)) else [results]


def custom_op(op):
    """The operator as a differentiable function of TensorFlow tensors.

    Args:
        op: a deep500lite operator with input and output descriptors.

    Returns:
        ``fn(*tensors)`` returning a tuple with one tensor per output (also for one output, as
        Deep500's custom operators did: ``y, = fn(x)``); ``tf.GradientTape`` differentiates it
        through ``op.backward``.
    """
    if not hasattr(op, "input_descriptors") or not hasattr(op, "output_descriptors"):
        raise UserTypeError(f"custom_op needs a d5.CustomOp with descriptors. Received: {type(op).__name__}")
    ins, outs = list(op.input_descriptors), list(op.output_descriptors)
    out_types = [tf.as_dtype(d.dtype) for d in outs]
    in_types = [tf.as_dtype(d.dtype) for d in ins]
    name = type(op).__name__

    def np_forward(*arrays):
        return list(check_outputs(op, as_tuple(op.forward(*arrays))))

    def np_backward(*arrays):
        n_out, n_in = len(outs), len(ins)
        grads = list(arrays[:n_out])
        xs = list(arrays[n_out:n_out + n_in])
        ys = list(arrays[n_out + n_in:])
        results = as_tuple(op.backward(grads, xs, ys))
        if len(results) != n_in:
            raise UserError(f"{name}.backward returned {len(results)} gradients for {n_in} inputs; it must return "
                            f"one gradient per input. Received: {len(results)} gradients")
        return [np.asarray(r, dtype=x.dtype).reshape(x.shape) for r, x in zip(results, xs)]

    @tf.custom_gradient
    def fn(*xs):
        xs = [tf.convert_to_tensor(x, dtype=t) for x, t in zip(xs, in_types)]
        ys = _as_list(tf.numpy_function(np_forward, xs, out_types, stateful=False, name=name))
        for y, d in zip(ys, outs):
            y.set_shape(_shape(d))

        def grad(*dys):
            dys = [tf.zeros_like(y) if g is None else tf.cast(g, y.dtype) for g, y in zip(dys, ys)]
            gxs = _as_list(tf.numpy_function(np_backward, [*dys, *xs, *ys], in_types, stateful=False,
                                             name=f"{name}_Grad"))
            for g, x in zip(gxs, xs):
                g.set_shape(x.shape)
            return [g if x.dtype.is_floating else None for g, x in zip(gxs, xs)]

        return (ys[0] if len(ys) == 1 else list(ys)), grad

    def call(*tensors):
        if len(tensors) != len(ins):
            raise UserError(f"{name} takes {len(ins)} inputs. Received: {len(tensors)}")
        tensors = list(tensors)
        for i, t in enumerate(tensors):
            known = getattr(t, "shape", None)
            if known is not None and None not in tuple(known):
                shape = input_shape_for(op, i, tuple(known))
                if shape is not None:
                    tensors[i] = tf.reshape(t, shape)
        out = fn(*tensors)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)

    call.op = op
    call.__name__ = f"custom_{name}"
    return call
