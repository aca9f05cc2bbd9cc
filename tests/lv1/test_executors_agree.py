"""One ONNX network, four frameworks, the same answers."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import deep500lite as d5
from support import run_cli
from deep500lite import networks


@pytest.mark.parametrize("model,shape", [("mlp", (20,)), ("lenet", (1, 8, 8)), ("lenet", (1, 28, 28)),
                                         ("bn_cnn", (3, 16, 16))])
def test_zoo_models_match_reference(framework, model, shape):
    net, i, o = networks.create_model(model, 8, classes=10, shape=shape, seed=3)
    feeds = net.random_feeds(seed=5)
    result = d5.test_executor_inference(d5.executor(net, framework), feeds, d5.executor(net, "reference"))
    assert result.passed, result.summary()
    assert result.metrics[o]["MaxError"] < 1e-4


@pytest.mark.parametrize("producer", [pytest.param("torch", marks=pytest.mark.requires("torch")),
                                      pytest.param("torch_dynamo", marks=pytest.mark.requires("torch")),
                                      pytest.param("keras", marks=pytest.mark.requires("tensorflow", "tf2onnx"))])
def test_exported_models_match_their_producer(exported, framework, producer):
    path, feeds, expected = exported[producer]
    result = d5.test_executor_inference(d5.executor(d5.load_model(path), framework), feeds, expected,
                                        rtol=1e-4, atol=1e-4)
    assert result.passed, result.summary()


def test_comparison_detects_a_difference(framework):
    net, i, o = networks.create_model("mlp", 4, shape=(6,))
    ex = d5.executor(net, framework)
    reference = d5.executor(net, "reference")
    w = ex.network.fetch_tensor("fc1.weight")
    ex.network.feed_tensor("fc1.weight", w + np.float32(0.5))
    result = d5.test_executor_inference(ex, net.random_feeds(), reference)
    assert not result.passed and result.metrics[o]["MaxError"] > 1e-3
    assert "FAILED" in result.summary()


def test_unsupported_operator_names_who_supports_it():
    pytest.importorskip("torch", reason="needs torch")
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="LOWER", name="norm")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(d5.UnsupportedOperatorError,
                       match=r"torch executor does not support operator 'StringNormalizer' \(node 'norm'\). "
                             r"Executors that support it: reference.*onnxruntime"):
        d5.executor(d5.load_model(model), "torch")


def test_cli_infer_table_over_frameworks(lenet_file):
    names = [n for n in ("torch", "tensorflow", "onnxruntime") if d5.is_framework_available(n)] + ["reference"]
    proc = run_cli("infer", lenet_file, "--frameworks", ",".join(names), "--batch-size", "4", "--max-time", "0.3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("framework"))
    assert "max |err| vs reference" in lines[header] and "median latency [95% CI]" in lines[header]
    rows = {line.split()[0]: line for line in lines[header + 2:]}
    assert set(rows) == set(names)
    for name, row in rows.items():
        err = float(row.split()[2])
        assert err < 1e-4, row
        assert "[" in row and "]" in row


REQUIRED_OPS = """Conv ConvTranspose Gemm MatMul Add Sub Mul Div Pow Sqrt Exp Log Erf Neg Abs Relu LeakyRelu Sigmoid
Tanh Clip Softmax LogSoftmax MaxPool AveragePool GlobalAveragePool GlobalMaxPool BatchNormalization LRN Dropout
Flatten Reshape Transpose Concat Split Slice Squeeze Unsqueeze Gather Shape Constant ConstantOfShape Identity Cast
Pad ReduceMean ReduceSum ReduceMax Sum Where Equal Expand Range LSTM GRU SoftmaxCrossEntropyLoss
NegativeLogLikelihoodLoss""".split()


def test_every_executor_declares_the_required_operators(framework):
    from deep500lite.registry import import_framework

    module = import_framework(framework)
    assert module.executor_class.SUPPORTED_OPS == module.SUPPORTED_OPS
    assert [op for op in REQUIRED_OPS if op not in module.SUPPORTED_OPS] == []


def test_gpu_request_without_gpu_is_a_clear_error(framework, lenet_file):
    from deep500lite.registry import import_framework

    if import_framework(framework).executor_class.supports_device(d5.GPUDevice(0)):
        pytest.skip("this machine has a GPU for this framework")
    with pytest.raises(d5.DeviceError, match=rf"The {framework} executor cannot run on gpu:0: .+"):
        d5.executor(d5.load_model(lenet_file), framework, device="gpu:0")
