"""The reference executor's numpy ConvTranspose equals onnx.reference's own implementation.

(output_shape is covered by ONNX's backend test test_convtranspose_output_shape in the conformance run;
onnx.reference itself refuses some output_shape cases.)
"""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from deep500lite.frameworks.reference.ops.conv import ConvTranspose

CASES = [
    dict(strides=[1, 1]),
    dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
    dict(strides=[2, 2], dilations=[2, 2]),
    dict(strides=[3], pads=[1, 1], output_padding=[2]),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[2, 2], auto_pad="SAME_LOWER"),
    dict(strides=[2, 1], pads=[0, 1, 2, 0]),
    dict(strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1]),
    dict(strides=[1, 1], dilations=[2, 2], auto_pad="VALID"),
]


@pytest.mark.parametrize("attrs", CASES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()))
def test_conv_transpose_matches_onnx_reference(attrs):
    rng = np.random.default_rng(0)
    n_spatial = len(attrs["strides"])
    x = rng.normal(size=(2, 3) + (4,) * n_spatial).astype(np.float32)
    w = rng.normal(size=(3, 2) + (3,) * n_spatial).astype(np.float32)
    b = rng.normal(size=2).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in "xwb"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": x, "w": w, "b": b}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = ReferenceEvaluator(model, new_ops=[ConvTranspose]).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
