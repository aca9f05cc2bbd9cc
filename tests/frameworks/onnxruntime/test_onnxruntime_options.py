"""ONNX Runtime executor options: graph optimization levels, thread counts, execution providers,
recorded in ``executor.options``, with session building counted as compile time."""

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime")

import deep500lite as d5  # noqa: E402
from deep500lite import datasets, networks  # noqa: E402
from deep500lite.errors import DeviceError, UserError  # noqa: E402


def _net():
    net, _, out = networks.create_model("bn_cnn", 4, classes=3, shape=(1, 6, 6), seed=0, width=4)
    net.add_operation(datasets.SoftmaxCrossEntropy()([out, "label"], "loss"))
    return net


def _feeds():
    rng = np.random.default_rng(0)
    return {"input": rng.standard_normal((4, 1, 6, 6)).astype(np.float32),
            "label": rng.integers(0, 3, 4).astype(np.int64)}


@pytest.mark.parametrize("variant, level", [("onnxruntime:O0", "disabled"), ("ort:o3", "all")])
def test_optimization_levels_agree_with_the_reference_and_are_recorded(variant, level):
    net = _net()
    expected = d5.executor(net, "reference").inference(_feeds())
    ex = d5.executor(net, variant, intra_op_num_threads=1, inter_op_num_threads=1)
    assert ex.options == {"graph_optimization_level": level, "intra_op_num_threads": 1,
                          "inter_op_num_threads": 1, "providers": ["CPUExecutionProvider"]}
    assert ex.compile_seconds == 0.0  # the session is built on first use
    got = ex.inference(_feeds())
    built = ex.compile_seconds
    assert built > 0.0
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-5)
    ex.inference(_feeds())
    assert ex.compile_seconds == built
    ex.inference_and_backprop(_feeds())  # the training graph's session
    assert ex.compile_seconds > built


def test_bad_options_say_what_is_allowed():
    net = _net()
    with pytest.raises(UserError, match="allowed 'disabled', 'basic', 'extended'.*"
                                        "Received: graph_optimization_level='O9'"):
        d5.executor(net, "onnxruntime", graph_optimization_level="O9")
    with pytest.raises(UserError, match="intra_op_num_threads must be an integer >= 0.*"
                                        "Received: intra_op_num_threads=-1"):
        d5.executor(net, "onnxruntime", intra_op_num_threads=-1)
    if "TensorrtExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(DeviceError, match="no TensorrtExecutionProvider.*onnxruntime-gpu"):
            d5.executor(net, "onnxruntime", providers=["TensorrtExecutionProvider", "CPUExecutionProvider"])
    else:  # onnxruntime-gpu with TensorRT installed: its provider is taken and recorded
        ex = d5.executor(net, "onnxruntime", providers=["TensorrtExecutionProvider", "CPUExecutionProvider"])
        assert ex.options["providers"][0] == "TensorrtExecutionProvider"
    ex = d5.executor(net, "onnxruntime", providers=["CPUExecutionProvider"])
    assert ex.options["providers"] == ["CPUExecutionProvider"] and ex.options["graph_optimization_level"] == "all"
