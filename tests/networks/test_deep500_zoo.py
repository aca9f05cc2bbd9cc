"""Deep500's zoo entry points: export_network, per-model default shapes, Deep500's keywords, deep_mnist."""

import os

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import networks
from deep500lite.errors import UserError


@pytest.mark.parametrize("name,shape", [("simple_cnn", (1, 28, 28)), ("deep_mnist", (1, 28, 28)),
                                        ("lenet", (1, 28, 28)), ("resnet", (3, 32, 32)),
                                        ("wide_resnet", (3, 32, 32)), ("bert", (128,))])
def test_each_model_has_its_own_default_shape(name, shape):
    assert networks.default_shape(name) == shape
    if name not in ("bert", "wide_resnet"):
        net, inp, _ = networks.create_model(name, 2)
        assert net.get_input_nodes()[0].type.shape.shape == [2, *shape]


def test_export_network_writes_deep500s_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = networks.export_network('simple_cnn', 64)
    assert path == 'mnist_cnn.onnx' and os.path.isfile(tmp_path / path)
    model = d5.parser.load_and_parse_model(path)
    assert model.get_input_nodes()[0].type.shape.shape == [64, 1, 28, 28]
    assert model.get_output_nodes()[0].name == 'output'
    # Deep500's simple_cnn architecture (the zoo's mnist_cnn), with the weights create_model builds
    net, _, _ = networks.create_model('mnist_cnn', 64)
    assert model.parameters == net.parameters == ['conv1.weight', 'conv1.bias', 'conv2.weight', 'conv2.bias',
                                                  'fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']
    for name in net.parameters:
        np.testing.assert_array_equal(model.fetch_tensor(name), net.fetch_tensor(name))
    assert networks.count_parameters(net) == 21840  # as Deep500's PyTorch module
    # create_model('simple_cnn') is Deep500's too; the batch-normalized CNN is bn_cnn, and its
    # width option given to simple_cnn names bn_cnn in the error
    same, _, _ = networks.create_model('simple_cnn', 64)
    assert same.parameters == net.parameters and 'BatchNormalization' not in {n.op_type for n in same.graph.node}
    own, _, _ = networks.create_model('bn_cnn', 64)
    assert 'BatchNormalization' in {n.op_type for n in own.graph.node}
    with pytest.raises(d5.UserError, match="now 'bn_cnn'"):
        networks.create_model('simple_cnn', 64, width=8)


def test_export_network_positional_arguments_in_deep500s_order(tmp_path):
    # resnet: (batch_size, depth, classes, file_path, shape)
    path = networks.export_network(' ResNet ', 4, 20, 5, str(tmp_path / 'r.onnx'), (3, 16, 16))
    model = d5.parser.load_and_parse_model(path)
    assert model.get_input_nodes()[0].type.shape.shape == [4, 3, 16, 16]
    assert sum(n.op_type == 'Conv' for n in model.graph.node) == 21
    out = d5.executor(model, "reference").inference({'input': np.zeros((4, 3, 16, 16), np.float32)})
    assert out['output'].shape == (4, 5)
    # wide_resnet: (batch_size, depth, widen_factor, dropout, classes, shape, file_path)
    path = networks.export_network('wide_resnet', 2, 10, 1, 0.0, 3, (3, 8, 8), str(tmp_path / 'w.onnx'))
    assert d5.parser.load_and_parse_model(path).get_input_nodes()[0].type.shape.shape == [2, 3, 8, 8]


def test_deep500s_keywords(tmp_path):
    # samples/train_until.py's call: the sample shape as channels, height, width
    path = networks.export_network('simple_cnn', 8, classes=10, channels=3, height=16, width=20,
                                   file_path=str(tmp_path / 's.onnx'))
    assert d5.parser.load_and_parse_model(path).get_input_nodes()[0].type.shape.shape == [8, 3, 16, 20]
    net, _, _ = networks.create_model('wide_resnet', 1, depth=10, widen_factor=2, shape=(3, 8, 8),
                                      file_path=str(tmp_path / 'w.onnx'))
    assert os.path.isfile(tmp_path / 'w.onnx')
    assert net.fetch_tensor('block1.0.conv1.weight').shape[0] == 32  # 16 x widen_factor
    # wide_resnet's own 'width' (its widening factor) keeps its meaning without channels/height
    net, _, _ = networks.create_model('wide_resnet', 1, depth=10, width=1, shape=(3, 8, 8))
    assert net.fetch_tensor('block1.0.conv1.weight').shape[0] == 16


@pytest.mark.parametrize("call,match", [
    (lambda p: networks.export_network('caffenet', 1), r"Network 'caffenet' not found"),
    (lambda p: networks.export_network('simple_cnn', 1, 10, (1, 28, 28), p, 'x'), r"at most 3 positional"),
    (lambda p: networks.export_network('simple_cnn', 1, shape=(1, 8, 8)), r"at least 16x16 pixels"),
    (lambda p: networks.export_network('simple_cnn', 1, 10, classes=10), r"both by position and by keyword"),
    (lambda p: networks.create_model('lenet', 1, channels=1, height=8), r"all of channels=, height=, width="),
    (lambda p: networks.create_model('lenet', 1, widen_factor=2), r"widen_factor is wide_resnet's"),
    (lambda p: networks.create_model('wide_resnet', 1, with_linear=False), r"Only with_linear=True"),
])
def test_errors(call, match, tmp_path):
    with pytest.raises(UserError, match=match):
        call(str(tmp_path / 'm.onnx'))


def test_deep_mnist_learns_shapes_and_trains_one_step():
    net, inp, out = networks.create_model('deep_mnist', 4, classes=10)
    ops = [n.op_type for n in net.graph.node]
    assert ops.count('Conv') == 4 and ops.count('BatchNormalization') == 4 and ops.count('Dropout') == 3
    assert networks.count_parameters(net) == networks.model_parameter_count('deep_mnist')
    result = d5.executor(net, "reference").inference({inp: np.zeros((4, 1, 28, 28), np.float32)})
    assert result[out].shape == (4, 10)
