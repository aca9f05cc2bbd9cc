"""``deep500lite bench overhead --op FILE:FACTORY``: a user's operator, forward and backward, through every executor.

``FACTORY`` in ``FILE.py`` (or ``MODULE``) is an operator with input and output descriptors (a
``d5.CustomPythonOp``, a compiled C++ or CUDA operator), or a function of no arguments returning
one. The file is imported with its folder on ``sys.path``, so it may import its neighbours or
compile a ``.cpp`` file beside it.

On each executor variant (``torch``, ``torch:compile``, ``jax``, ``onnxruntime:O3``, ...) the operator
is one custom node of a small ONNX graph whose loss is ``sum_j sum(y_j * g_j)``, with each
floating-point input a parameter, so one ``inference_and_backprop`` call runs the operator's
forward and its backward (the parameters' gradients are the input gradients) the way a network
would. It is timed in alternation (:func:`deep500lite.metrics.time_paired`) against the
operator's own ``forward`` then ``backward`` on numpy arrays, the cost of the operator itself;
the ratio is what the executor adds around a custom operator. Both sides' outputs and gradients
are checked to agree first. An executor that cannot run a custom operator (``tensorflow:xla``)
is refused before anything runs on it, and its row says why.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from deep500lite.errors import Deep500Error, UserError, UserTypeError

__all__ = ["load_user_op", "UserOpResult", "run_user_op_overhead", "user_op_graph"]


def load_user_op(spec: str):
    """The operator ``FILE.py:FACTORY`` or ``MODULE:FACTORY`` names (an operator, or a function returning one).

    Raises:
        UserError: the spec cannot be loaded, or does not give an operator with descriptors.
    """
    from deep500lite.bench.user_code import load_attribute

    obj = load_attribute(spec, "--op", "an operator with descriptors or a function of no arguments returning one")
    if not hasattr(obj, "input_descriptors") and callable(obj):
        try:
            obj = obj()
        except Deep500Error:
            raise
        except Exception as exc:  # noqa: BLE001 - an error in the user's factory is the user's to fix
            raise UserError(f"--op {spec!r}: calling the factory failed: {type(exc).__name__}: {exc}. Received: "
                            f"{spec!r}") from exc
    if not hasattr(obj, "input_descriptors") or not hasattr(obj, "output_descriptors"):
        raise UserTypeError(f"--op {spec!r} must give a deep500lite operator with input and output descriptors (a "
                            f"d5.CustomPythonOp or a compiled C++ operator), or a function returning one. Received: "
                            f"{type(obj).__name__}")
    for d in list(obj.input_descriptors) + list(obj.output_descriptors):
        if d.shape is None or any(s is None for s in d.shape):
            raise UserError(f"--op {spec!r}: every descriptor needs a concrete shape to make inputs of. Received: "
                            f"{d}")
    return obj


def user_op_graph(op, op_type: str):
    """A network running ``op`` as one custom node: loss = sum over outputs of sum(y_j * g_j).

    Floating-point inputs are parameters ``x0, x1, ...`` (their gradients are the operator's input
    gradients); other inputs and the output gradients ``g0, g1, ...`` are network inputs.

    Returns:
        ``(network, parameter names, input names)``.
    """
    from onnx import helper, numpy_helper

    from deep500lite.lv0.custom import CUSTOM_DOMAIN, custom_node
    from deep500lite.lv1.network import load_model

    def vinfo(name, desc):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(desc.dtype)),
                                             list(desc.shape))

    ins = [f"x{i}" for i in range(len(op.input_descriptors))]
    outs = [f"y{j}" for j in range(len(op.output_descriptors))]
    params = [n for n, d in zip(ins, op.input_descriptors) if np.dtype(d.dtype).kind == "f"]
    nodes = [custom_node(op_type, ins, outs)]
    terms = []
    for j, d in enumerate(op.output_descriptors):
        if np.dtype(d.dtype).kind != "f":
            continue
        nodes += [helper.make_node("Mul", [outs[j], f"g{j}"], [f"m{j}"]),
                  helper.make_node("ReduceSum", [f"m{j}"], [f"s{j}"], keepdims=0)]
        terms.append(f"s{j}")
    if not terms:
        raise UserError(f"--op: operator {type(op).__name__} has no floating-point output to differentiate. "
                        f"Received: outputs {list(map(str, op.output_descriptors))}")
    nodes.append(helper.make_node("Sum", terms, ["loss"]))
    inputs = [vinfo(n, d) for n, d in zip(ins, op.input_descriptors) if n not in params]
    inputs += [vinfo(f"g{j}", d) for j, d in enumerate(op.output_descriptors) if np.dtype(d.dtype).kind == "f"]
    init = [numpy_helper.from_array(np.zeros(d.shape, d.dtype), n) for n, d in zip(ins, op.input_descriptors)
            if n in params]
    graph = helper.make_graph(nodes, f"user_{op_type}", inputs, [vinfo(o, d) for o, d in
                                                                  zip(outs, op.output_descriptors)],
                              initializer=init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(CUSTOM_DOMAIN, 1)], ir_version=8)
    return load_model(model), params, [i.name for i in inputs]


def _arrays(descs, rng) -> list[np.ndarray]:
    out = []
    for d in descs:
        dt = np.dtype(d.dtype)
        out.append(rng.standard_normal(d.shape).astype(dt) if dt.kind == "f" else np.zeros(d.shape, dt))
    return out


@dataclasses.dataclass
class UserOpResult:
    """One executor variant's timing of the user's operator, or why it did not run.

    Attributes:
        variant: the executor variant (``torch:compile``).
        paired: a :class:`~deep500lite.metrics.timing.PairedMeasurement` (a = through the executor,
            b = the operator's own forward and backward), or None when refused.
        max_abs_error: the largest difference of outputs and gradients between the two sides.
        refused: why the executor cannot run it, or None.
        compile_seconds: the executor's compile time (left out of the timing: the first call runs
            before timing starts).
    """

    variant: str
    paired: object = None
    max_abs_error: float | None = None
    refused: str | None = None
    compile_seconds: float = 0.0

    def to_dict(self) -> dict:
        """JSON-ready form with every raw sample."""
        out = {"variant": self.variant, "refused": self.refused, "max_abs_error": self.max_abs_error,
               "compile_seconds": self.compile_seconds}
        if self.paired is not None:
            out.update({"executor": self.paired.a.to_dict(), "direct": self.paired.b.to_dict(),
                        "ratios": list(self.paired.ratios), "ratio": self.paired.ratio.to_dict()})
        return out


def run_user_op_overhead(op, variants, max_time: float = 5.0, progress=None, seed: int = 0,
                         tolerance: float = 1e-4) -> list[UserOpResult]:
    """Time ``op`` forward and backward through each executor variant against its own direct call.

    Args:
        op: the operator (:func:`load_user_op`).
        variants: framework keys or executor variant spellings.
        max_time: seconds of timed work per variant.
        progress: called with a short message before each variant.
        seed: seed of the inputs and output gradients.
        tolerance: the largest difference allowed between the executor's and the direct results.

    Returns:
        One :class:`UserOpResult` per variant, in order.
    """
    from deep500lite.errors import UnsupportedOperatorError
    from deep500lite.lv0.custom import as_tuple, register_op
    from deep500lite.metrics.timing import time_paired
    from deep500lite.registry import canonical_executor_spelling, executor

    rng = np.random.default_rng(seed)
    xs = _arrays(op.input_descriptors, rng)
    gs = _arrays(op.output_descriptors, rng)
    op_type = f"UserOp{type(op).__name__}{abs(hash(id(op))) % 10**8}"
    register_op(op, op_type)
    results = []

    def direct():
        ys = [np.asarray(y) for y in as_tuple(op.forward(*xs))]
        gx = [np.asarray(g) for g in as_tuple(op.backward(gs, xs, ys))]
        return ys, gx

    want_y, want_g = direct()
    for spelling in variants:
        variant = canonical_executor_spelling(spelling)
        if progress:
            progress(f"{variant}: {type(op).__name__} forward + backward")
        net, params, feed_names = user_op_graph(op, op_type)
        try:
            ex = executor(net, variant)
        except UnsupportedOperatorError as exc:
            results.append(UserOpResult(variant, refused=" ".join(str(exc).split())))
            continue
        for i, name in enumerate(f"x{i}" for i in range(len(xs))):
            if name in params:
                ex.network.feed_tensor(name, xs[i])
        feeds = {n: xs[int(n[1:])] if n.startswith("x") else gs[int(n[1:])] for n in feed_names}
        grad_names = [f"{p}_grad" for p in params]
        outputs = [f"y{j}" for j in range(len(op.output_descriptors))]

        def through(ex=ex, feeds=feeds, grad_names=grad_names, outputs=outputs):
            out = ex.inference_and_backprop(feeds, "loss")
            return [out[o] for o in outputs], ex.network.fetch_tensors(grad_names)

        ys, gx = through()  # compiles, where the executor compiles
        float_in = [i for i, d in enumerate(op.input_descriptors) if np.dtype(d.dtype).kind == "f"]
        err = max([float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
                   for a, b in zip(ys, want_y)]
                  + [float(np.max(np.abs(gx[k].astype(np.float64) - want_g[i]))) if gx[k].size else 0.0
                     for k, i in enumerate(float_in)])
        if err > tolerance:
            raise AssertionError(f"{variant}: the operator through the executor and called directly disagree by "
                                 f"{err:.3g} (more than {tolerance:g}).")
        paired = time_paired(through, direct, label_a=f"{variant} executor", label_b="direct",
                             max_time=max_time, target_rel_ci=0.02)
        results.append(UserOpResult(variant, paired, err, None, float(getattr(ex, "compile_seconds", 0.0))))
    return results
