"""Deep500's EuroMPI'19 tutorial, notebook 2_manual: its Level-1 cells (model, loss, executor) on deep500lite.

The cells "Model" (``dataset_shape``, ``dataset_loss``, ``create_model('resnet', depth=20,
...)``, ``add_operation``) and "Executor" (``from_model(model, device=...)``), run as the
notebook writes them; changed: the imports and ``GPUDevice`` -> ``CPUDevice``; the data are
CIFAR-10 binary batches written from scikit-learn's digits (``DEEP500LITE_DATA``). The training
cells are in test_port_train_2_manual.py. The checks: the model is built for CIFAR-10's samples
without being told their shape (as Deep500's ResNet exporter defaulted to 3x32x32), the loss
is appended and its index returned, and the executor's inference on a real batch equals the
reference executor's.
"""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets as d5ds
from deep500lite import networks as d5nt
from support import write_digits_as_cifar10

pytest.importorskip("torch")


@pytest.fixture
def cifar_files(tmp_path, monkeypatch):
    write_digits_as_cifar10(tmp_path / "cifar10")
    monkeypatch.setenv("DEEP500LITE_DATA", str(tmp_path))
    return tmp_path


def test_model_cells():
    shape = d5ds.dataset_shape('cifar10')
    loss = d5ds.dataset_loss('cifar10')
    batch_size = 64
    print(shape, loss)

    model, input_node, output_node = d5nt.create_model('resnet', depth=20, classes=shape[0], batch_size=batch_size)
    nodes_before = len(model.graph.node)
    place = model.add_operation(loss([output_node, 'label'], 'loss'))

    assert shape == (10, 3, 32, 32)
    assert place == nodes_before  # Deep500 returned the operation's place in the graph
    (image,) = model.get_input_nodes()[:1]
    assert image.name == input_node
    assert image.type.shape.shape == [batch_size, 3, 32, 32] and image.type.type.to_numpy() == np.float32
    assert 'loss' in model.get_outputs() and 'label' in model.get_inputs()
    assert sum(1 for n in model.graph.node if n.op_type == 'Conv') == 19 + 2  # ResNet-20 and two projections


def test_executor_cells_infer_as_the_reference_does(cifar_files):
    shape = d5ds.dataset_shape('cifar10')
    loss = d5ds.dataset_loss('cifar10')
    batch_size = 64
    model, input_node, output_node = d5nt.create_model('resnet', depth=20, classes=shape[0], batch_size=batch_size)
    model.add_operation(loss([output_node, 'label'], 'loss'))
    train_set, validation_set = d5ds.load_dataset('cifar10', input_node, 'label')

    from deep500lite.frameworks import pytorch as d5fw
    executor = d5fw.from_model(model, device=d5.CPUDevice())

    batch = validation_set[0:batch_size]
    outputs = executor.inference(batch)
    assert outputs[output_node].shape == (batch_size, 10)
    assert np.isfinite(outputs['loss']) and outputs['loss'] > 0
    # Level-1 validation, deep500lite's form: the same network on the reference executor
    from deep500lite.frameworks import reference as d5ref
    comparison = d5.test_executor_inference(executor, batch, d5ref.from_model(model))
    assert comparison.passed, comparison.summary()


def test_asking_for_a_missing_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    model, _, _ = d5nt.create_model('resnet', depth=20, classes=10, batch_size=2)
    from deep500lite.frameworks import pytorch as d5fw
    with pytest.raises(d5.DeviceError, match="gpu"):
        d5fw.from_model(model, device=d5.GPUDevice())
