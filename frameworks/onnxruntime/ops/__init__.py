"""What the ONNX Runtime executor supports: the CPU kernels of the installed onnxruntime (with
their operator-version ranges), and the ONNX operators defined as functions (ONNX Runtime
inlines those).

ONNX Runtime runs the graph itself, so this package holds no converters, only the support table
(``SUPPORTED_OPS``) and :func:`unsupported_reason`, the version- and type-aware check of one node;
it has the same name as the converter packages of the other frameworks (``<fw>.ops``).
"""

from __future__ import annotations

import functools

import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from onnxruntime.capi import _pybind_state as _ort

__all__ = ["SUPPORTED_OPS", "max_opset", "unsupported_reason"]

# op type -> [(first version, last version, {type constraint: allowed types})]
_KERNELS: dict[str, list[tuple[int, int, dict]]] = {}
for _k in _ort.get_all_opkernel_def():
    if _k.domain in ("", "ai.onnx") and _k.provider == "CPUExecutionProvider":
        _KERNELS.setdefault(_k.op_name, []).append(
            (_k.version_range[0], _k.version_range[1], {c: set(t) for c, t in _k.type_constraints.items()}))

_FUNCTIONS = {s.name for s in onnx.defs.get_all_schemas()
              if s.domain == "" and (s.has_function or s.has_context_dependent_function)}

# Constant nodes have no kernel: onnxruntime turns them into initializers when it loads a model.
_GRAPH_LEVEL = {"Constant"}

SUPPORTED_OPS: frozenset = frozenset(_KERNELS) | frozenset(_FUNCTIONS) | frozenset(_GRAPH_LEVEL)


@functools.lru_cache(maxsize=1)
def max_opset() -> int:
    """The newest default-domain opset this onnxruntime accepts in a model (found by trying)."""
    for opset in range(onnx.defs.onnx_opset_version(), 6, -1):
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
        try:
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            return opset
        except Exception:  # noqa: BLE001 - a refused opset: try the next lower one
            continue
    return 7


def _formal_types(formals, names, types) -> dict[str, set]:
    """Type-constraint name -> the tensor types the node gives it (e.g. {'T': {'tensor(int16)'}})."""
    found: dict[str, set] = {}
    for i, name in enumerate(names):
        if not name or name not in types or not formals:
            continue
        formal = formals[min(i, len(formals) - 1)]  # a variadic last parameter covers the rest
        found.setdefault(formal.type_str, set()).add(types[name])
    return found


def unsupported_reason(node, opset: int, types: dict[str, str] | None = None) -> str | None:
    """Why ``node`` in a model of default opset ``opset`` cannot run here, or None if it can.

    Args:
        node: the ONNX node.
        opset: the model's default-domain opset.
        types: tensor name -> ``"tensor(float)"``-style type, where known; used to check that a
            CPU kernel exists for the node's element types.
    """
    op_type = node.op_type
    if op_type not in SUPPORTED_OPS:
        return "onnxruntime has no CPU kernel for it"
    try:
        schema = onnx.defs.get_schema(op_type, opset)
    except onnx.defs.SchemaError:
        return f"ONNX defines no {op_type} at opset {opset}"
    since = schema.since_version
    newest = max_opset()
    if since > newest:
        return (f"the model needs {op_type}-{since} (opset {opset}) and onnxruntime {ort.__version__} "
                f"supports opsets up to {newest}")
    kernels = [k for k in _KERNELS.get(op_type, ()) if k[0] <= since <= k[1]]
    if op_type in _KERNELS and not kernels:
        return f"onnxruntime {ort.__version__} has no CPU kernel for {op_type}-{since}"
    if kernels and types:
        used = _formal_types(schema.inputs, node.input, types)
        for constraint, found in _formal_types(schema.outputs, node.output, types).items():
            used.setdefault(constraint, set()).update(found)
        # Some versions have one kernel per element type: one kernel must accept them all.
        if not any(all(found <= allowed.get(c, found) for c, found in used.items()) for _, _, allowed in kernels):
            described = ", ".join(sorted(t for found in used.values() for t in found))
            return f"onnxruntime {ort.__version__} has no CPU kernel for {op_type}-{since} with {described}"
    return None
