"""Custom operators as differentiable JAX functions.

``custom_op(op)`` returns a function of JAX arrays that XLA can compile: the operator's numpy
``forward`` runs through ``jax.pure_callback`` (XLA calls back into Python on the host), and
``jax.custom_vjp`` makes ``jax.grad`` call the operator's ``backward`` the same way. A compiled
C++ operator is called through its numpy interface (``forward``/``backward``), so inside a jitted
function a custom node costs a host round trip of its inputs and outputs; XLA cannot fuse across
it. Output shapes come from the operator's ``output_descriptors``; a dimension left open there
(``None``) takes the size of the first input's dimension at the same position.
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv0.custom import as_tuple, check_outputs, input_shape_for

__all__ = ["custom_op"]


def _output_structs(op, xs):
    import jax

    structs = []
    for k, desc in enumerate(op.output_descriptors):
        shape = desc.shape
        if shape is None:
            shape = tuple(xs[0].shape)
        elif any(s is None for s in shape):
            ref = tuple(xs[0].shape)
            if len(ref) != len(shape):
                raise UserError(f"{type(op).__name__} output {k} is declared {desc} with open dimensions; the jax "
                                f"executor needs the output shape before running the operator and can only take "
                                f"open dimensions from input 0 of the same rank. Received: input 0 of shape "
                                f"{list(ref)}")
            shape = tuple(r if s is None else s for s, r in zip(shape, ref))
        structs.append(jax.ShapeDtypeStruct(tuple(int(s) for s in shape), np.dtype(desc.dtype)))
    return structs


def _check_inputs(op, xs) -> list:
    """The inputs, each in the shape the operator declares (see ``input_shape_for``)."""
    out = []
    for i, (x, desc) in enumerate(zip(xs, op.input_descriptors)):
        if np.dtype(x.dtype) != np.dtype(desc.dtype):
            raise UserTypeError(f"{type(op).__name__} input {i} must be {desc}. Received: a {x.dtype} array")
        shape = input_shape_for(op, i, x.shape)
        out.append(x if shape is None else x.reshape(shape))
    return out


def custom_op(op):
    """A JAX function running the deep500lite operator ``op`` (differentiable through its ``backward``).

    Args:
        op: a :class:`~deep500lite.CustomOp` (Python or compiled C++).

    Returns:
        A function of JAX arrays returning a tuple with one array per output (also for one
        output, as the torch and TensorFlow ``custom_op`` functions and Deep500's did).
    """
    import jax

    n_out = len(op.output_descriptors)

    def host_forward(*xs):
        results = check_outputs(op, as_tuple(op.forward(*[np.asarray(x) for x in xs])))
        return tuple(np.ascontiguousarray(r) for r in results)

    def host_backward(n_in, *arrays):
        xs, rest = [np.asarray(a) for a in arrays[:n_in]], [np.asarray(a) for a in arrays[n_in:]]
        gys, ys = rest[:n_out], rest[n_out:]
        results = as_tuple(op.backward(gys, xs, ys))
        if len(results) != n_in:
            raise UserError(f"{type(op).__name__}.backward returned {len(results)} gradients for {n_in} inputs; "
                            f"it must return one gradient per input. Received: {len(results)} gradients")
        return tuple(np.ascontiguousarray(np.asarray(r, dtype=x.dtype).reshape(x.shape)) for r, x in zip(results, xs))

    def forward(*xs):
        return tuple(jax.pure_callback(host_forward, tuple(_output_structs(op, xs)), *xs))

    @jax.custom_vjp
    def run(*xs):
        return forward(*xs)

    def run_fwd(*xs):
        ys = forward(*xs)
        return ys, (xs, ys)

    def run_bwd(saved, gys):
        xs, ys = saved
        gys = tuple(jax.numpy.zeros_like(y) if g is None else g.astype(y.dtype) for g, y in zip(gys, ys))
        structs = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs)
        grads = jax.pure_callback(lambda *a: host_backward(len(xs), *a), structs, *xs, *gys, *ys)
        return tuple(g if jax.numpy.issubdtype(x.dtype, jax.numpy.floating) else None for g, x in zip(grads, xs))

    run.defvjp(run_fwd, run_bwd)

    def call(*xs):
        xs = _check_inputs(op, xs)
        if not xs:
            raise UserError(f"{type(op).__name__}: custom operators need at least one input. Received: no inputs")
        return tuple(run(*xs))

    return call
