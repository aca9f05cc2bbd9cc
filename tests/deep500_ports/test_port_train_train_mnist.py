"""Deep500's samples/train_mnist.py (an optimizer stepped by hand over a Dataset) on deep500lite.

Changed: the imports and the data (MNIST files written from scikit-learn's digits through
``DEEP500LITE_DATA``); the sample's prints become assertions.
"""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets as d5ds
from deep500lite import networks as d5net
from support import write_digits_as_mnist

pytest.importorskip("tensorflow")

LABEL_NODE = 'labels'
BATCH_SIZE = 64


def _accuracy(executor, test_set, output_node):
    n = len(test_set)
    wrong = 0
    for i in range(len(test_set) // BATCH_SIZE):
        inp = test_set[i*BATCH_SIZE:(i+1)*BATCH_SIZE]
        out = executor.inference(inp)
        wrong += np.sum(inp[LABEL_NODE] != np.argmax(out[output_node], axis=1))
    return (n - wrong) / n


def test_one_epoch_by_hand_raises_accuracy(tmp_path, monkeypatch):
    write_digits_as_mnist(tmp_path / "mnist")
    monkeypatch.chdir(tmp_path)  # the sample writes its ONNX file to the working folder
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    import deep500lite.frameworks.tensorflow as d5tf

    onnx_file = d5net.export_network('simple_cnn', BATCH_SIZE)
    model = d5.parser.load_and_parse_model(onnx_file)
    INPUT_NODE = model.get_input_nodes()[0].name
    OUTPUT_NODE = model.get_output_nodes()[0].name
    train_set, test_set = d5ds.load_mnist(INPUT_NODE, LABEL_NODE)
    model.add_operation(d5.ops.SoftmaxCrossEntropy([OUTPUT_NODE, LABEL_NODE], 'loss'))
    tensorflow_executor = d5tf.from_model(model)
    optimizer = d5tf.GradientDescent(tensorflow_executor, 'loss')

    before = _accuracy(tensorflow_executor, test_set, OUTPUT_NODE)
    for i in range(len(train_set) // BATCH_SIZE):
        inp = train_set[i*BATCH_SIZE:(i+1)*BATCH_SIZE]
        optimizer.step(inp)
    after = _accuracy(tensorflow_executor, test_set, OUTPUT_NODE)
    assert after > before + 0.2
