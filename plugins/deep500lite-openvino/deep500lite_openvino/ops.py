"""The ONNX operators the OpenVINO executor declares: those OpenVINO's ONNX frontend reads.

OpenVINO has no call that lists its ONNX translators, so the table is measured: every one-operator
node test of ONNX's backend suite (``onnx.backend.test``) whose model ``openvino.Core.read_model``
accepts counts its operator as supported. ``python -m deep500lite_openvino.ops`` measures it again
with the installed onnx and openvino and prints the table to paste here (about 30 s); the
conformance tests (``tests/frameworks/openvino/``) then run every node test of these operators.
Measured with openvino 2026.4.1 and onnx 1.23.2.
"""

from __future__ import annotations

__all__ = ["SUPPORTED_OPS", "measure_supported_ops"]

SUPPORTED_OPS: frozenset = frozenset({
    "Abs", "Acos", "Acosh", "Add", "AffineGrid", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh",
    "Attention", "AveragePool", "BatchNormalization", "Bernoulli", "BitShift", "BitwiseAnd", "BitwiseNot",
    "BitwiseOr", "BitwiseXor", "BlackmanWindow", "Cast", "CastLike", "Ceil", "Celu", "CenterCropPad", "Clip", "Col2Im",
    "Compress", "Concat", "Constant", "ConstantOfShape", "Conv", "ConvInteger", "ConvTranspose", "Cos", "Cosh",
    "CumSum", "DFT", "DepthToSpace", "DequantizeLinear", "Div", "Dropout", "DynamicQuantizeLinear", "Einsum", "Elu",
    "Equal", "Erf", "Exp", "Expand", "EyeLike", "Flatten", "Floor", "GRU", "Gather", "GatherElements", "GatherND",
    "Gelu", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "Greater", "GreaterOrEqual", "GridSample",
    "GroupNormalization", "HammingWindow", "HannWindow", "HardSigmoid", "HardSwish", "Hardmax", "Identity", "If",
    "InstanceNormalization", "IsInf", "IsNaN", "LRN", "LSTM", "LayerNormalization", "LeakyRelu", "Less",
    "LessOrEqual", "Log", "LogSoftmax", "Loop", "LpNormalization", "LpPool", "MatMul", "MatMulInteger", "Max",
    "MaxPool", "Mean", "MeanVarianceNormalization", "Min", "Mish", "Mod", "Mul", "Neg", "NegativeLogLikelihoodLoss",
    "NonMaxSuppression", "NonZero", "Not", "OneHot", "Or", "PRelu", "Pad", "Pow", "QLinearConv", "QLinearMatMul",
    "QuantizeLinear", "RMSNormalization", "RNN", "Range", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Relu",
    "Reshape", "Resize", "ReverseSequence", "RoiAlign", "RotaryEmbedding", "Round", "Scan", "Scatter",
    "ScatterElements", "ScatterND", "Selu", "Shape", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Size", "Slice",
    "Softmax", "SoftmaxCrossEntropyLoss", "Softplus", "Softsign", "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub",
    "Sum", "Swish", "Tan", "Tanh", "ThresholdedRelu", "Tile", "TopK", "Transpose", "Trilu", "Unique", "Unsqueeze",
    "Upsample", "Where", "Xor",
})


def measure_supported_ops() -> tuple[set, set]:
    """``(supported, refused)`` operator names, from the one-operator node tests of ``onnx.backend.test``.

    An operator is supported when ``openvino.Core.read_model`` accepts at least one of its node
    tests' models, refused when it accepts none.
    """
    import warnings

    import openvino as ov
    from onnx.backend.test.loader import load_model_tests

    core = ov.Core()
    accepted, rejected = set(), set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [c for c in load_model_tests(kind="node") if c.model is not None]
    for case in cases:
        nodes = case.model.graph.node
        if len(nodes) != 1 or nodes[0].domain not in ("", "ai.onnx"):
            continue
        try:
            core.read_model(case.model.SerializeToString())
        except Exception:  # noqa: BLE001 - the frontend refusing the operator (any error type)
            rejected.add(nodes[0].op_type)
        else:
            accepted.add(nodes[0].op_type)
    return accepted, rejected - accepted


if __name__ == "__main__":
    supported, refused = measure_supported_ops()
    print("SUPPORTED_OPS =", sorted(supported))
    print("refused:", sorted(refused))
