"""The ONNX operators in the real-model zoo's graphs (every model, exporter and export variant).

Collected from a full build of the zoo (``deep500lite bench zoo --json`` records each case's
operators under ``op_types``). ``tests/bench/test_zoo_ops.py`` fails when one of them has neither an
autodiff rule nor a "not differentiable" declaration, and ``tests/cli/test_bench_zoo.py`` when a
graph of the CI slice uses an operator missing here (the list is then stale: rebuild it from the
JSON of a full run).
"""

from __future__ import annotations

__all__ = ["ZOO_OP_TYPES"]

#: default-domain operators of the zoo's graphs, 73 of them
ZOO_OP_TYPES: frozenset[str] = frozenset({
    'Abs', 'Add', 'And', 'ArgMax', 'AveragePool', 'BatchNormalization', 'Cast', 'Ceil', 'Clip', 'Concat',
    'ConstantOfShape', 'Conv', 'Cos', 'CumSum', 'Div', 'Einsum', 'Equal', 'Erf', 'Exp', 'Expand', 'Flatten',
    'GRU', 'Gather', 'GatherElements', 'GatherND', 'Gelu', 'Gemm', 'GlobalAveragePool', 'Greater',
    'GreaterOrEqual', 'HardSwish', 'Identity', 'InstanceNormalization', 'LSTM', 'LayerNormalization', 'Less',
    'LessOrEqual', 'Log', 'MatMul', 'MaxPool', 'Min', 'Mod', 'Mul', 'Neg', 'Not', 'Pad', 'Pow', 'RNN',
    'Range', 'Reciprocal', 'ReduceL2', 'ReduceMean', 'ReduceSum', 'Relu', 'Reshape', 'Resize',
    'ScatterElements', 'ScatterND', 'Shape', 'Sigmoid', 'Sign', 'Sin', 'Slice', 'Softmax', 'Split', 'Sqrt',
    'Squeeze', 'Sub', 'Tanh', 'Tile', 'Transpose', 'Unsqueeze', 'Where'
})
