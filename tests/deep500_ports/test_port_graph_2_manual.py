"""Level 1 of Deep500's EuroMPI'19 notebook ``2_manual``: a zoo model, a loss, executors.

Checked here: ``dataset_shape`` gives ``(classes, C, H, W)`` and ``dataset_loss`` a loss class;
``create_model('resnet', depth=..., classes=..., batch_size=...)`` with keywords only builds a
network for the dataset's images without being told their shape; ``add_operation`` returns the
new node's index; and ``from_model(model, device=...)`` called twice on the same model gives two
executors that both start from the model's initial weights, as Deep500's did (its notebook
trains a second executor "with augmentation" from scratch).
"""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite import datasets as d5ds
from deep500lite import networks as d5nt
from support import framework_params


def test_shape_loss_and_zoo_model_fit_the_dataset():
    classes, channels, height, width = d5ds.dataset_shape("cifar10")
    loss_class = d5ds.dataset_loss("cifar10")
    net, x_name, y_name = d5nt.create_model("resnet", depth=20, classes=classes, batch_size=4)
    before = len(net.graph.node)
    index = net.add_operation(loss_class([y_name, "target"], "objective"))

    assert (classes, channels, height, width) == (10, 3, 32, 32)
    assert index == before and net.graph.node[index].output[0] == "objective"
    (first,) = net.get_input_nodes()[:1]
    assert first.name == x_name and first.type.shape.shape == [4, 3, 32, 32]
    assert "target" in net.get_inputs() and "objective" in net.get_outputs()
    # ResNet-20: 19 3x3 convolutions, plus two 1x1 projections where the width doubles
    assert sum(node.op_type == "Conv" for node in net.graph.node) == 21


def _trained_once(framework):
    net, x_name, y_name = d5nt.create_model("simple_cnn", 16, seed=11)
    net.add_operation(d5.ops.SoftmaxCrossEntropy([y_name, "digit"], "loss"))
    fw = __import__(f"deep500lite.frameworks.{framework}", fromlist=["from_model"])
    first = fw.from_model(net, device=d5.CPUDevice())
    names = net.get_params()
    start = [w.copy() for w in first.network.fetch_tensors(names)]
    rng = np.random.default_rng(4)
    batch = {x_name: rng.random((16, 1, 28, 28), dtype=np.float32), "digit": rng.integers(0, 10, 16)}
    from deep500lite.frameworks import reference as d5ref

    sgd = d5ref.GradientDescent(first, "loss", 0.5)
    for _ in range(3):
        sgd.step(batch)
    return fw, net, names, start, first


@pytest.mark.parametrize("framework", framework_params(["torch", "tensorflow", "reference"]))
def test_a_second_executor_of_a_model_starts_from_its_initial_weights(framework):
    fw, net, names, start, first = _trained_once(framework)
    trained = first.network.fetch_tensors(names)
    assert any(not np.array_equal(a, b) for a, b in zip(trained, start))  # the first one learned

    second = fw.from_model(net, device=d5.CPUDevice())
    for name, fresh, init in zip(names, second.network.fetch_tensors(names), start):
        np.testing.assert_array_equal(fresh, init, err_msg=name)
    # and the first executor keeps what it trained
    for name, kept, now in zip(names, trained, first.network.fetch_tensors(names)):
        np.testing.assert_array_equal(kept, now, err_msg=name)


def test_asking_for_an_absent_gpu_names_the_device():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from deep500lite.frameworks import pytorch as torch_fw

    net, _, _ = d5nt.create_model("simple_cnn", 2)
    with pytest.raises(d5.DeviceError, match="gpu"):
        torch_fw.from_model(net, device=d5.GPUDevice())
