"""Level 1: a framework's own ONNX operator as a level-0 operator (:func:`framework_op`).

:class:`FrameworkOp` runs one ONNX operator through a framework's graph executor
(``d5.executor(network, framework)``), so framework operators are validated with the level-0
checks (:func:`d5.test_op_forward`, :func:`d5.test_op_gradient`, :func:`d5.test_op_determinism`)
the same way as custom operators. It lives in level 1 because it builds executors; the checks
themselves only call ``forward`` and ``backward``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv0.operator import CustomOp
from deep500lite.lv0.tensordesc import TensorDescriptor
from deep500lite.lv0.validation.common import F64, as_tuple

__all__ = ["FrameworkOp", "framework_op"]

_LOSS = "d5_loss"
_OPSET = 17


def _io_names(params, count: int, what: str, op_type: str) -> list:
    names = []
    for idx in range(count):
        if idx < len(params):
            p = params[idx]
            variadic = p.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
            names.append(f"{p.name}{idx}" if variadic else p.name)
        elif params and params[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
            names.append(f"{params[-1].name}{idx}")
        else:
            raise UserError(f"framework_op: {op_type} takes at most {len(params)} {what}s. Received: {count}")
    return names


def _value_info(name: str, desc: TensorDescriptor):
    shape = None if desc.shape is None else [d if d is not None else f"{name}_d{j}" for j, d in enumerate(desc.shape)]
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(desc.dtype), shape)


class FrameworkOp(CustomOp):
    """One ONNX operator run by a framework's graph executor, as a level-0 operator.

    ``forward`` runs a one-node graph with ``executor.inference``. ``backward`` runs a graph that
    adds ``loss = sum_k ReduceSum(Mul(y_k, g_k))`` (the output gradients ``g_k`` are graph inputs)
    with ``executor.inference_and_backprop(feeds, y=loss)``: executors return gradients of
    parameters, so the floating-point inputs of that graph are initializers, set with
    ``feed_tensor`` before each call, and their gradients are read with ``fetch_tensors``. Other
    inputs (integers, booleans) are graph inputs and get zero gradients. Graphs are built on first
    use (the backward graph once per set of input shapes). Float64 variants of the graphs are built
    when :meth:`supports_dtype` is asked about float64, so the numerical gradient can be exact.

    Make one with :func:`framework_op`.

    Attributes:
        framework: the framework key.
        op_type: the ONNX operator type.
        attributes: the node's attributes.
        input_names: the graph's input names (the ONNX schema's names for the operator).
        output_names: the graph's output names.
    """

    def __init__(self, framework: str, op_type: str, input_descs: Sequence[TensorDescriptor],
                 output_descs: Sequence[TensorDescriptor] | None = None, device=None, attributes=None,
                 opset: int = _OPSET):
        from deep500lite.registry import canonical_framework

        self.framework = canonical_framework(framework)
        self.op_type = op_type
        self.device = device
        self.attributes = dict(attributes or {})
        self.opset = opset
        try:
            schema = onnx.defs.get_schema(op_type, opset)
        except onnx.defs.SchemaError as exc:
            raise UserError(f"framework_op: {op_type!r} is not an ONNX operator in opset {opset}; give an operator "
                            "type of the ONNX standard domain, such as 'Relu' or 'Conv'. "
                            f"Received: {op_type!r}") from exc
        input_descs = list(input_descs)
        if not all(isinstance(d, TensorDescriptor) for d in input_descs):
            raise UserTypeError("framework_op: input_descs must be d5.tensordesc(...) values. "
                                f"Received: {input_descs!r}")
        if len(input_descs) < schema.min_input:
            raise UserError(f"framework_op: {op_type} needs at least {schema.min_input} inputs "
                            f"({', '.join(p.name for p in schema.inputs)}). Received: {len(input_descs)}")
        self.input_names = _io_names(schema.inputs, len(input_descs), "input", op_type)
        n_out = len(output_descs) if output_descs is not None else schema.min_output
        self.output_names = _io_names(schema.outputs, n_out, "output", op_type)
        self._node = helper.make_node(op_type, self.input_names, self.output_names, **self.attributes)
        if output_descs is None:
            output_descs = self._infer_outputs(input_descs)
        super().__init__(input_descs, list(output_descs))
        self._forward_executors: dict = {}
        self._backward_executors: dict = {}
        self._float64: bool | None = None

    # ------------------------------------------------------------------ graphs
    def _model(self, input_descs, output_descs, initial=None, with_loss=False) -> onnx.ModelProto:
        initial = initial or {}
        nodes = [self._node]
        inputs = [_value_info(n, d) for n, d in zip(self.input_names, input_descs) if n not in initial]
        inits = [numpy_helper.from_array(v, n) for n, v in initial.items()]
        if with_loss:
            sums = []
            for k, (name, d) in enumerate(zip(self.output_names, output_descs)):
                if d.dtype.kind != "f":
                    continue
                g = f"d5_grad_{name}"
                inputs.append(_value_info(g, d))
                nodes.append(helper.make_node("Mul", [name, g], [f"d5_prod_{k}"]))
                nodes.append(helper.make_node("ReduceSum", [f"d5_prod_{k}"], [f"d5_sum_{k}"], keepdims=0))
                sums.append(f"d5_sum_{k}")
            nodes.append(helper.make_node("Sum", sums, [_LOSS]))
            dtype = next(d.dtype for d in output_descs if d.dtype.kind == "f")
            outputs = [helper.make_tensor_value_info(_LOSS, helper.np_dtype_to_tensor_dtype(dtype), [])]
        else:
            outputs = [_value_info(n, d) for n, d in zip(self.output_names, output_descs)]
        graph = helper.make_graph(nodes, f"d5_{self.op_type}", inputs, outputs, initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8  # what opset 17 was released with; every supported runtime reads it
        return model

    def _infer_outputs(self, input_descs) -> list:
        model = self._model(input_descs, [TensorDescriptor(np.float32, None)] * len(self.output_names))
        del model.graph.output[:]
        model.graph.output.extend(helper.ValueInfoProto(name=n) for n in self.output_names)
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        except Exception as exc:  # noqa: BLE001 - reported with the fix
            raise UserError(f"framework_op: cannot infer the outputs of {self.op_type} from the inputs "
                            f"({str(exc).splitlines()[0]}). Pass output_descs=[d5.tensordesc(dtype, shape), ...], "
                            f"or inputs the operator accepts. Received: {', '.join(map(str, input_descs))}") from exc
        found = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
        descs = []
        for name in self.output_names:
            vi = found.get(name)
            tt = vi.type.tensor_type if vi is not None else None
            if tt is None or tt.elem_type == 0:
                raise UserError(f"framework_op: ONNX shape inference gives no type for output '{name}' of "
                                f"{self.op_type}. Pass output_descs=[d5.tensordesc(dtype, shape), ...]. "
                                f"Received: input_descs={', '.join(map(str, input_descs))}, output_descs=None")
            shape = None if not tt.HasField("shape") else tuple(
                d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
            descs.append(TensorDescriptor(helper.tensor_dtype_to_np_dtype(tt.elem_type), shape))
        return descs

    def _descs_for(self, float_dtype):
        def swap(d):
            return TensorDescriptor(float_dtype, d.shape) if d.dtype.kind == "f" else d
        if float_dtype is None:
            return self.input_descriptors, self.output_descriptors
        return [swap(d) for d in self.input_descriptors], [swap(d) for d in self.output_descriptors]

    def _variant(self, inputs) -> np.dtype | None:
        """None for the declared dtypes, float64 for the float64 variant."""
        if all(d.matches(x) for d, x in zip(self.input_descriptors, inputs)):
            return None
        if all((x.dtype == F64) if d.dtype.kind == "f" else d.matches(x)
               for d, x in zip(self.input_descriptors, inputs)):
            return F64
        got = ", ".join(f"{x.dtype.name}{list(x.shape)}" for x in inputs)
        want = ", ".join(map(str, self.input_descriptors))
        raise UserError(f"{self.op_type} on {self.framework} takes inputs {want} (or their float64 variant). "
                        f"Received: {got}")

    def _executor(self, variant, shapes=None):
        from deep500lite.registry import executor

        if shapes is None:
            if variant not in self._forward_executors:
                ins, outs = self._descs_for(variant)
                self._forward_executors[variant] = executor(self._model(ins, outs), self.framework, device=self.device)
            return self._forward_executors[variant]
        key = (variant, shapes)
        if key not in self._backward_executors:
            ins, outs = self._descs_for(variant)
            initial = {n: np.zeros(s, d.dtype) for n, d, s in zip(self.input_names, ins, shapes) if s is not None}
            model = self._model(ins, outs, initial=initial, with_loss=True)
            self._backward_executors[key] = executor(model, self.framework, device=self.device)
        return self._backward_executors[key]

    # --------------------------------------------------------------- operator
    def supports_dtype(self, dtype) -> bool:
        """Whether the operator runs with floating-point inputs and outputs of ``dtype``.

        The declared dtype always works; for float64 a float64 variant of the graph is built once
        (a framework that cannot build it answers False).
        """
        dtype = np.dtype(dtype)
        if all(d.dtype == dtype for d in self.input_descriptors if d.dtype.kind == "f"):
            return True
        if dtype != F64:
            return False
        if self._float64 is None:
            try:
                self._executor(F64)
                self._float64 = True
            except Exception:  # noqa: BLE001 - any build failure means "not supported"
                self._float64 = False
        return self._float64

    def forward(self, *inputs):
        """Run the one-node graph on the framework (numpy in, numpy out)."""
        inputs = [np.asarray(x) for x in inputs]
        if len(inputs) != len(self.input_names):
            raise UserError(f"{self.op_type} takes {len(self.input_names)} inputs ({', '.join(self.input_names)}). "
                            f"Received: {len(inputs)}")
        ex = self._executor(self._variant(inputs))
        results = ex.inference(dict(zip(self.input_names, inputs)))
        outs = tuple(np.asarray(results[n]) for n in self.output_names)
        return outs if len(outs) > 1 else outs[0]

    def backward(self, grads, fwd_inputs, fwd_outputs):
        """Gradients of every input from the framework's own backward pass (zeros for non-float inputs)."""
        inputs = [np.asarray(x) for x in fwd_inputs]
        variant = self._variant(inputs)
        shapes = tuple(x.shape if x.dtype.kind == "f" else None for x in inputs)
        ex = self._executor(variant, shapes)
        feeds = {}
        for name, x in zip(self.input_names, inputs):
            if x.dtype.kind == "f":
                ex.network.feed_tensor(name, x)
            else:
                feeds[name] = x
        _, outs = self._descs_for(variant)
        for name, g, d in zip(self.output_names, as_tuple(grads), outs):
            if d.dtype.kind == "f":
                feeds[f"d5_grad_{name}"] = np.asarray(g, d.dtype)
        ex.inference_and_backprop(feeds, y=_LOSS)
        have = dict(ex.network.gradient(_LOSS))
        result = []
        for name, x in zip(self.input_names, inputs):
            if x.dtype.kind == "f" and name in have:
                result.append(np.asarray(ex.network.fetch_tensors([have[name]])[0], x.dtype).reshape(x.shape))
            else:
                result.append(np.zeros_like(x))
        return tuple(result) if len(result) > 1 else result[0]

    def __repr__(self) -> str:
        inputs = ", ".join(map(str, self.input_descriptors))
        return f"FrameworkOp({self.framework!r}, {self.op_type!r}, inputs=[{inputs}], attributes={self.attributes})"


def framework_op(framework: str, op_type: str, input_descs: Sequence[TensorDescriptor],
                 output_descs: Sequence[TensorDescriptor] | None = None, device=None, **attributes) -> FrameworkOp:
    """One ONNX operator of a framework's executor as an :class:`~deep500lite.Operator`.

    The operator is a one-node ONNX graph (opset 17) run with ``d5.executor(network, framework)``,
    so it can be checked with :func:`~deep500lite.lv0.validation.test_op_forward`,
    :func:`~deep500lite.lv0.validation.test_op_gradient` and
    :func:`~deep500lite.lv0.validation.test_op_determinism`, or compared with the same operator on
    another framework.

    Args:
        framework: ``reference``, ``torch``, ``tensorflow`` or ``onnxruntime`` (or an alias).
        op_type: the ONNX operator type (``"Conv"``, ``"Softmax"``, ...).
        input_descs: one ``d5.tensordesc`` per input, in the ONNX schema's order (optional
            inputs may be left off the end).
        output_descs: one descriptor per output; default from ONNX shape inference (the
            operator's required outputs).
        device: the executor's device (``"cpu"``, ``"gpu:0"``).
        **attributes: the node's ONNX attributes (``axis=1``, ``pads=[1, 1, 1, 1]``, ...).

    Returns:
        A :class:`FrameworkOp`.

    Raises:
        UserError: unknown operator, too few or too many inputs, or outputs that cannot be
            inferred.
        deep500lite.UserError: unknown framework (the message lists the known ones).

    >>> import numpy as np, deep500lite as d5
    >>> sm = d5.framework_op("reference", "Softmax", [d5.tensordesc(np.float32, [2, 5])], axis=-1)
    >>> x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    >>> d5.test_op_gradient(sm, [x], verbose=False).passed
    True
    """
    return FrameworkOp(framework, op_type, input_descs, output_descs, device=device, attributes=attributes)
