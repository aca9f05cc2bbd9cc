"""Custom operators in ONNX Runtime sessions, through onnxruntime-extensions.

onnxruntime-extensions serves Python functions as ONNX Runtime custom operators of the domain
``ai.onnx.contrib`` (its ``onnx_op`` decorator and shared library). deep500lite registers each
custom operator a graph uses, and its ``<op_type>_Grad`` backward, as such a function, and loads the
extensions library into the session, so a graph mixing standard and custom nodes runs in one
``InferenceSession`` (and trains, with the backward graph of deep500lite's ONNX autodiff).

Memory: onnxruntime-extensions passes inputs as numpy arrays and copies each result back through
a Python list (``ndarray.tolist()``), so a custom node costs a copy of its outputs and a Python
call; it runs on the CPU execution provider. The registered function looks the operator up when
it is called, so re-registering an op type with ``d5.register_op`` takes effect in new sessions.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx

from deep500lite.errors import FrameworkNotAvailableError, UserError
from deep500lite.lv0.custom import (CUSTOM_DOMAIN, as_tuple, check_outputs, grad_op_type, is_custom_domain,
                                    lookup_custom_op, register_op, registered_op)

__all__ = ["custom_op", "OnnxRuntimeCustomOp", "extensions_available", "session_options_for"]

_lock = threading.Lock()
_PYOPS: dict[str, tuple] = {}  # op type -> (input types, output types) registered with onnxruntime-extensions


def extensions_available() -> bool:
    """Whether onnxruntime-extensions is installed."""
    from deep500lite.utils import is_package_available

    return is_package_available("onnxruntime_extensions")


def _extensions():
    try:
        import onnxruntime_extensions as ext
    except ImportError as exc:
        raise FrameworkNotAvailableError(
            "Custom operators on ONNX Runtime need onnxruntime-extensions: pip install onnxruntime-extensions "
            "(or pip install 'deep500lite[onnxruntime]').") from exc
    return ext


def _pyop_type(ext, dtype):
    d = ext.PyCustomOpDef
    table = {np.dtype(np.float32): d.dt_float, np.dtype(np.float64): d.dt_double, np.dtype(np.int64): d.dt_int64,
             np.dtype(np.int32): d.dt_int32, np.dtype(np.uint8): d.dt_uint8, np.dtype(np.int8): d.dt_int8,
             np.dtype(np.bool_): d.dt_bool, np.dtype(np.float16): d.dt_float16}
    try:
        return table[np.dtype(dtype)]
    except KeyError:
        raise UserError(f"onnxruntime-extensions custom operators take {sorted(str(k) for k in table)}. "
                        f"Received: {np.dtype(dtype)}") from None


def _ensure_pyop(op_type: str) -> None:
    """Register ``ai.onnx.contrib::op_type`` with the extensions (its forward, then its backward).

    The registered function looks the operator up in deep500lite's registry at each call.
    """
    ext = _extensions()
    for name in (op_type, grad_op_type(op_type)):
        op = lookup_custom_op(name, CUSTOM_DOMAIN)
        types = (tuple(_pyop_type(ext, d.dtype) for d in op.input_descriptors),
                 tuple(_pyop_type(ext, d.dtype) for d in op.output_descriptors))
        with _lock:
            known = _PYOPS.get(name)
            if known == types:
                continue
            if known is not None:
                raise UserError(
                    f"Custom operator '{name}' was registered with onnxruntime-extensions for other dtypes or "
                    "arities earlier in this process, and the extensions cannot replace it; register the new "
                    f"operator under another op type. Received: inputs {[str(d) for d in op.input_descriptors]}, "
                    f"outputs {[str(d) for d in op.output_descriptors]}")
            ext.onnx_op(op_type=name, inputs=list(types[0]), outputs=list(types[1]))(_dispatcher(name))
            _PYOPS[name] = types


def _dispatcher(op_type: str):
    def body(*arrays):
        current = lookup_custom_op(op_type, CUSTOM_DOMAIN)
        return tuple(check_outputs(current, as_tuple(current.forward(*arrays))))

    return body


_OPTION_FIELDS = ("enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse", "enable_profiling",
                  "execution_mode", "execution_order", "graph_optimization_level", "inter_op_num_threads",
                  "intra_op_num_threads", "log_severity_level", "log_verbosity_level", "logid",
                  "optimized_model_filepath", "profile_file_prefix", "use_deterministic_compute",
                  "use_per_session_threads")


def session_options_for(model: onnx.ModelProto, base, cache: dict):
    """The ``SessionOptions`` to run ``model`` with: ``base``, or a copy with the extensions loaded.

    onnxruntime-extensions fixes the set of Python operators of a ``SessionOptions`` when its
    library is registered there, so options are made anew (copying ``base``'s settings; session
    config entries cannot be read back and are not copied) whenever the model uses an operator
    registered after that.

    Args:
        model: the model about to run.
        base: the executor's ``onnxruntime.SessionOptions``.
        cache: the executor's state (``{"ops": frozenset, "options": SessionOptions}``), updated.
    """
    # ONNX Runtime's own NCHWc kernels (grad_rewrite.py writes them) are built in, not custom
    custom = [n for n in model.graph.node if is_custom_domain(n.domain) and n.domain != "com.microsoft.nchwc"]
    if not custom:
        return base
    needed = set()
    for node in custom:
        lookup_custom_op(node.op_type, node.domain, node.name or node.output[0])
        if node.domain != CUSTOM_DOMAIN:
            raise UserError(f"ONNX Runtime runs custom operators of the domain '{CUSTOM_DOMAIN}' only "
                            f"(onnxruntime-extensions). Received: node '{node.name}' in '{node.domain}'.")
        base_type = node.op_type[:-len("_Grad")] if node.op_type.endswith("_Grad") else node.op_type
        if registered_op(CUSTOM_DOMAIN, base_type) is None:
            base_type = node.op_type
        _ensure_pyop(base_type)
        needed.add(node.op_type)
    if cache.get("options") is not None and needed <= cache["ops"]:
        return cache["options"]
    import onnxruntime as ort

    options = ort.SessionOptions()
    for field in _OPTION_FIELDS:
        try:
            setattr(options, field, getattr(base, field))
        except (AttributeError, TypeError):  # a field this onnxruntime lacks or will not set
            pass
    options.register_custom_ops_library(_extensions().get_library_path())
    with _lock:
        cache.update(ops=frozenset(_PYOPS), options=options)
    return options


class OnnxRuntimeCustomOp:
    """A deep500lite operator as an ONNX Runtime custom operator (see :func:`custom_op`).

    Attributes:
        op: the deep500lite operator.
        op_type: its op type in the ``ai.onnx.contrib`` domain.
        domain: ``ai.onnx.contrib``.
    """

    def __init__(self, op, op_type: str):
        self.op = op
        self.op_type = op_type
        self.domain = CUSTOM_DOMAIN
        self._session = None
        register_op(op, op_type, CUSTOM_DOMAIN)
        _ensure_pyop(op_type)

    def node(self, inputs, outputs, name: str | None = None) -> onnx.NodeProto:
        """An ONNX node of this operator, to place in a graph with standard operators."""
        return onnx.helper.make_node(self.op_type, list(inputs), list(outputs), name=name or self.op_type,
                                     domain=self.domain)

    def session_options(self):
        """``onnxruntime.SessionOptions`` with the onnxruntime-extensions library loaded."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.register_custom_ops_library(_extensions().get_library_path())
        return options

    def __call__(self, *arrays):
        """Run the operator alone in an ``InferenceSession`` (one node); returns a tuple of arrays."""
        import onnxruntime as ort

        if self._session is None:
            ins = [f"x{i}" for i in range(len(self.op.input_descriptors))]
            outs = [f"y{i}" for i in range(len(self.op.output_descriptors))]
            graph = onnx.helper.make_graph([self.node(ins, outs)], self.op_type,
                                           [d.value_info(n) for n, d in zip(ins, self.op.input_descriptors)],
                                           [d.value_info(n) for n, d in zip(outs, self.op.output_descriptors)])
            model = onnx.helper.make_model(graph, ir_version=8, opset_imports=[
                onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid(CUSTOM_DOMAIN, 1)])
            self._session = ort.InferenceSession(model.SerializeToString(), self.session_options(),
                                                 providers=["CPUExecutionProvider"])
            self._inputs = ins
        return tuple(self._session.run(None, dict(zip(self._inputs, arrays))))


def custom_op(op, op_type: str | None = None) -> OnnxRuntimeCustomOp:
    """The operator as an ONNX Runtime custom operator (onnxruntime-extensions, domain ``ai.onnx.contrib``).

    Registers ``op`` as ``ai.onnx.contrib::op_type`` (and its backward as ``<op_type>_Grad``), so
    nodes of that type run in ONNX Runtime sessions and in every deep500lite executor.

    Args:
        op: a deep500lite operator with input and output descriptors.
        op_type: the op type (default: the operator's class name).

    Returns:
        An :class:`OnnxRuntimeCustomOp`: ``.node(inputs, outputs)`` for graphs, ``.session_options()``
        for your own sessions, and calling it runs the op in a one-node session.
    """
    return OnnxRuntimeCustomOp(op, op_type or type(op).__name__)
