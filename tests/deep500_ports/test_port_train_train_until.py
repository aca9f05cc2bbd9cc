"""Deep500's samples/train_until.py (a Trainer with a stopping condition) on deep500lite.

The sample's main block, run as ``train_until.py simple_cnn mnist 90`` (its three command-line
arguments: network, dataset, desired accuracy; the defaults are simple_cnn, mnist, 98) on MNIST
files written from scikit-learn's digits (``DEEP500LITE_DATA``). Changed: the imports and the
data.
"""

import pytest

import deep500lite as d5
from deep500lite import datasets as d5ds
from deep500lite import networks as d5net
from support import write_digits_as_mnist

pytest.importorskip("tensorflow")

LABEL_NODE = 'labels'
BATCH_SIZE = 64
MAX_EPOCHS = 10


def test_train_until_stops_at_the_desired_accuracy(tmp_path, monkeypatch):
    write_digits_as_mnist(tmp_path / "mnist")
    monkeypatch.chdir(tmp_path)  # the sample writes its ONNX file to the working folder
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    from deep500lite.frameworks import reference as d5ref
    from deep500lite.frameworks import tensorflow as d5tf
    netname, dsname, accuracy = 'simple_cnn', 'mnist', 90.0  # sys.argv[1:4]

    ds_cls, ds_c, ds_h, ds_w = d5ds.dataset_shape(dsname)
    onnx_file = d5net.export_network(netname, BATCH_SIZE, classes=ds_cls,
                                     channels=ds_c, height=ds_h, width=ds_w)
    model = d5.parser.load_and_parse_model(onnx_file)
    INPUT_NODE = model.get_input_nodes()[0].name
    OUTPUT_NODE = model.get_output_nodes()[0].name
    train_set, test_set = d5ds.load_dataset(dsname, INPUT_NODE, LABEL_NODE)
    model.add_operation(d5.ops.LabelCrossEntropy([OUTPUT_NODE, LABEL_NODE], 'loss'))

    executor = d5tf.from_model(model)
    optimizer = d5ref.GradientDescent(executor, 'loss')
    train_sampler = d5.ShuffleSampler(train_set, BATCH_SIZE)
    test_sampler = d5.ShuffleSampler(test_set, BATCH_SIZE)
    runner = d5.Trainer(train_sampler, test_sampler, executor, optimizer,
                        OUTPUT_NODE)
    events = d5.DefaultTrainerEvents(MAX_EPOCHS) + [
        d5.training_events.AccuracyAbortEvent(accuracy)]
    stats = runner.run_loop(MAX_EPOCHS, events)

    accuracies = [e["test_accuracy"] for e in stats.epochs]
    assert accuracies[-1] >= accuracy
    assert all(a < accuracy for a in accuracies[:-1])  # stopped at the first epoch that reached it
    assert len(accuracies) < MAX_EPOCHS or stats.stopped_by is not None
