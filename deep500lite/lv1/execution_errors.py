"""Run-time failures of executors turned into one :class:`~deep500lite.errors.ExecutionError`.

Executors run a network without any per-node bookkeeping; only after a framework raised do
they find the failing ONNX node (from the framework's message, from the traceback of the
generated code, or by running the graph again node by node) and call :func:`execution_error`,
which builds the message: the executor, the node's name and op type, its input shapes where
known, and the framework's message reduced to its cause by :func:`framework_cause`.

Executors raise the result outside their ``except`` block (or ``from None``), so the
framework's exception and the frames of its traceback are not kept alive by the new error.
"""

from __future__ import annotations

import re

from deep500lite.errors import ExecutionError

__all__ = ["execution_error", "framework_cause", "format_shapes", "shape_of", "session_error", "node_named_in",
           "MAX_CAUSE_CHARS"]

#: The longest cause (the framework's message, reduced) an :class:`ExecutionError` message keeps.
MAX_CAUSE_CHARS = 400

# Lines of a TensorFlow graph-execution message that are context, not the cause.
_TF_CONTEXT = ("Graph execution error", "Detected at node", "File ", "[[", "Traceback", "Stack trace",
               "Error in user-defined function", "Node:", "Op:")
_TF_FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}")
_TF_NODE_MARK = re.compile(r"\[\[\{\{node [^}]*\}\}\]\]|\[Op:\w+\]( name: \S*)?| for '\{\{node [^']*'")
_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")
_ORT_LOCATION = re.compile(r"^\S+\.(?:h|cc|cpp|cu):\d+ (?:[^()]*\([^)]*\)(?: const)? )?")
_ORT_SESSION_NODE = re.compile(r"Node \(([^)]*)\) Op \((\w+)\)\s*")
_ORT_NODE_PREFIX = re.compile(r"^Non-zero status code returned while running \w+ node\. Name:'[^']*' Status Message: ")


def framework_cause(exc: BaseException) -> str:
    """A framework's exception message reduced to its cause, on one line, at most ~400 characters.

    TensorFlow's "Graph execution error" puts the cause after a Python trace of where the graph
    was built: the last line that is not trace nor node marker is kept. ONNX Runtime's status
    prefix, C++ source location and "while running X node" preamble are dropped (the node is
    named separately). Other messages keep their non-empty lines, joined.

    Args:
        exc: the framework's exception.

    Returns:
        The cause, prefixed by the exception's type name.
    """
    text = str(getattr(exc, "message", None) or exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and lines[0].startswith("Graph execution error"):
        causes = [_TF_NODE_MARK.sub("", _TF_FUNCTION_NODE.sub("", ln)).strip() for ln in lines[1:]
                  if not ln.startswith(_TF_CONTEXT)]
        causes = [c for c in causes if c and not c.endswith(":")]
        lines = causes[-1:] or lines[-1:]
    else:
        lines = [_TF_NODE_MARK.sub("", _TF_FUNCTION_NODE.sub("", ln)).strip() for ln in lines]
        lines = [ln for ln in lines if ln]
    cause = " ".join(lines)
    cause = _ORT_PREFIX.sub("", cause)
    cause = _ORT_NODE_PREFIX.sub("", cause)
    cause = _ORT_LOCATION.sub("", cause)
    cause = " ".join(cause.split())
    cause = f"{type(exc).__name__}: {cause}" if cause else type(exc).__name__
    inner = exc.__cause__
    if inner is not None and str(inner).strip() and str(inner).strip() not in cause:
        # onnx.reference and others re-raise a vaguer error from the real one.
        cause += f" (from {type(inner).__name__}: {' '.join(str(inner).split())})"
    if len(cause) > MAX_CAUSE_CHARS:
        cause = cause[:MAX_CAUSE_CHARS - 3] + "..."
    return cause


def shape_of(value) -> list | None:
    """The shape of an array-like value as a list of ints, or None when it has none (a sequence, None)."""
    if value is None:
        return None
    if isinstance(value, (int, float, bool)):
        return []
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    try:
        return [int(d) if d is not None else None for d in (shape.as_list() if hasattr(shape, "as_list")
                                                              else shape)]
    except (TypeError, ValueError):
        return None


def format_shapes(input_shapes) -> str:
    """``[2, 3], [1]`` for a list of shapes (``?`` for an unknown one, ``absent`` for an omitted input)."""
    if input_shapes is None:
        return "unknown"
    if not input_shapes:
        return "none"
    parts = []
    for shape in input_shapes:
        if shape == "absent":
            parts.append("absent")
        elif shape is None:
            parts.append("?")
        else:
            parts.append("[" + ", ".join("?" if d is None else str(d) for d in shape) + "]")
    return ", ".join(parts)


def execution_error(executor: str, exc: BaseException | str, node=None, input_shapes=None,
                    where: str | None = None) -> ExecutionError:
    """The :class:`ExecutionError` reporting that ``executor`` failed, in ``node`` when known.

    Args:
        executor: the executor's framework name (``"tensorflow"``).
        exc: the framework's exception, or its cause already reduced to a string.
        node: the failing ``onnx.NodeProto``, or None when it could not be found.
        input_shapes: the node's input shapes (lists of ints; None for an unknown shape,
            ``"absent"`` for an omitted optional input), or None when unknown.
        where: what ran when it is not the network's inference graph (``"training graph"``: the
            message then says "node 'n' (Op) of the training graph").

    Returns:
        The error (not raised): one line, naming the executor, the node, its op type, its input
        shapes and the cause.
    """
    cause = exc if isinstance(exc, str) else framework_cause(exc)
    scope = f" of the {where}" if where else ""
    if node is None:
        message = (f"The {executor} executor failed while running the network{scope}; the failing node could not "
                   f"be determined: {cause}")
        return ExecutionError(message, executor=executor, cause=cause)
    name = node.name or (node.output[0] if len(node.output) else "")
    shapes = None if input_shapes is None else [None if s == "absent" else s for s in input_shapes]
    message = (f"The {executor} executor failed in node '{name}' ({node.op_type}){scope} with input shapes "
               f"{format_shapes(input_shapes)}: {cause}")
    return ExecutionError(message, executor=executor, node=name, op_type=node.op_type, input_shapes=shapes,
                          cause=cause)



def node_named_in(model, text: str):
    """The node of ``model`` (an ``onnx.ModelProto``) a framework message names.

    ONNX Runtime writes ``Node (name) Op (type)``; onnx.reference writes ``node 'Type'`` (the only
    node of that type is taken).

    Returns:
        The ``onnx.NodeProto``, or None when the message names none of the model's nodes.
    """
    match = _ORT_SESSION_NODE.search(text)
    if match is not None:
        name, op_type = match.groups()
        for node in model.graph.node:
            if (node.name or (node.output[0] if len(node.output) else "")) == name and node.op_type == op_type:
                return node
        return None
    # onnx.reference: "... for node 'Concat'" names the op type; only a single such node is certain.
    quoted = set(re.findall(r"node '([^']*)'", text))
    named = [n for n in model.graph.node if n.name and n.name in quoted]
    typed = [n for n in model.graph.node if n.op_type in quoted]
    if len(named) == 1:
        return named[0]
    return typed[0] if len(typed) == 1 else None


def session_error(executor: str, exc: BaseException, model, where: str | None = None) -> ExecutionError:
    """The :class:`ExecutionError` of a framework that refused to build a session for ``model``.

    ONNX Runtime checks each node while building a session (``Node (sm) Op (Softmax)
    [ShapeInferenceError] 'axis' must be in [-2 , 1]``): the node it names is looked up in
    ``model`` and named the usual way, with the check's message as the cause.
    """
    text = str(getattr(exc, "message", None) or exc)
    node = node_named_in(model, text)
    cause = framework_cause(exc)
    if node is not None:
        cause = _ORT_SESSION_NODE.sub("", cause)
    return execution_error(executor, cause, node, where=where)
