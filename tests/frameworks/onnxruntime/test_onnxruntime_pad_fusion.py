"""ONNX Runtime's Pad fusion and MaxPool: the onnxruntime executor keeps the answer right.

ONNX Runtime folds a constant-zero Pad into a following MaxPool's padding, which pads with minus
infinity, so windows of negative values and padding return the largest negative value instead of
0 (transformers' BiT stem is such a Pad and MaxPool). The onnxruntime executor turns that rule off
for such graphs (frameworks/onnxruntime/executor.py). When the second test fails, ONNX Runtime was
fixed and the workaround can go.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500lite as d5
from deep500lite.bench import zoo
from deep500lite.registry import framework_module

pytestmark = pytest.mark.requires("onnxruntime")


def _pad_then_pool():
    nodes = [helper.make_node("Pad", ["x", "pads", "zero"], ["p"], mode="constant"),
             helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
    inits = [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds():
    return {"x": -np.abs(np.random.default_rng(0).standard_normal((1, 2, 6, 6))).astype(np.float32) - 0.1}


def test_executor_pools_over_the_zero_padding():
    model = _pad_then_pool()
    got = d5.executor(d5.load_model(model), "onnxruntime").inference(_feeds())["y"]
    want = d5.executor(d5.load_model(model), "reference").inference(_feeds())["y"]
    np.testing.assert_array_equal(got, want)
    assert (want[..., 0, :] == 0).all()  # the first row of windows holds padding, all inputs are negative


def test_onnxruntime_pad_fusion_still_changes_the_answer():
    import onnxruntime as ort

    model = _pad_then_pool()
    fused = ort.InferenceSession(model.SerializeToString()).run(None, _feeds())[0]
    want = d5.executor(d5.load_model(model), "reference").inference(_feeds())["y"]
    assert (fused[..., 0, :] < 0).all() and not np.array_equal(fused, want)


@pytest.mark.requires("torch", "transformers")
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_bit_matches_torch_on_onnxruntime(exporter):
    model = framework_module("torch", "zoo").build("bit", exporter)
    cell = zoo.check_inference(model, "onnxruntime")
    assert cell.status == "pass", cell.detail
