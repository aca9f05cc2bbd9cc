"""Deep500's ``samples/synthetic_dataset.py``: a ``d5.Dataset`` of one's own feeding ``Optimizer.train``.

The sample's path, with a dataset and network of our own: a ``d5.Dataset`` subclass whose
``__init__`` calls ``super().__init__()`` bare and whose ``__getitem__`` answers an int, a slice
and a list; ``ShuffleSampler(dataset, batch_size=)``; a PyTorch module exported with
``torch.onnx.export`` and read by ``d5.parser.load_and_parse_model``;
``d5.ops.MeanSquaredError([output, target], 'loss')``; the TensorFlow executor; the reference
``GradientDescent(executor)`` with its defaults; ``optimizer.train(len(dataset), sampler)`` then
``sampler.reset()`` each epoch, and ``executor.inference`` to measure the loss.
"""

import numpy as np
import pytest

import deep500lite as d5
from deep500lite.frameworks import reference as d5ref

torch = pytest.importorskip("torch")
pytest.importorskip("tensorflow")


def plane(points):
    return (points @ np.array([[3.0], [-2.0]], np.float32) + 0.5).astype(np.float32)


class PlaneSamples(d5.Dataset):
    """Points uniform in [0, 1)^2 and their value on the plane 3 x - 2 y + 0.5, drawn on every access."""

    def __init__(self, point_name, value_name, seed):
        super().__init__()
        self.point_name, self.value_name = point_name, value_name
        self.draw = np.random.default_rng(seed).random

    def __len__(self):
        return 400

    def __getitem__(self, index):
        if isinstance(index, slice):
            index = range(*index.indices(len(self)))
        rows = 1 if isinstance(index, int) else len(index)
        points = self.draw((rows, 2), dtype=np.float32)
        sample = {self.point_name: points, self.value_name: plane(points)}
        return {k: v[0] for k, v in sample.items()} if isinstance(index, int) else sample


def _mean_loss(ex, point_name, draws=20):
    rng = np.random.default_rng(99)
    points = [rng.random((1, 2), dtype=np.float32) for _ in range(draws)]
    return float(np.mean([ex.inference({point_name: p, "target": plane(p)})["loss"] for p in points]))


def test_a_user_dataset_trains_a_plane_through_optimizer_train(tmp_path):
    torch.manual_seed(3)
    path = str(tmp_path / "plane.onnx")
    torch.onnx.export(torch.nn.Linear(2, 1), (torch.zeros(1, 2),), path, dynamo=False)
    net = d5.parser.load_and_parse_model(path)
    point_name, value_name = net.get_input_nodes()[0].name, net.get_output_nodes()[0].name
    net.add_operation(d5.ops.MeanSquaredError([value_name, "target"], "loss"))
    from deep500lite.frameworks import tensorflow as d5tf

    ex = d5tf.from_model(net)
    data = PlaneSamples(point_name, "target", seed=7)
    assert data[3][point_name].shape == (2,) and data[[4, 8, 15]]["target"].shape == (3, 1)
    assert data[10:40:10][point_name].shape == (3, 2)
    sampler = d5.ShuffleSampler(data, batch_size=1)
    sgd = d5ref.GradientDescent(ex)
    assert (sgd.loss, sgd.learning_rate) == ("loss", 0.1)  # Deep500's defaults

    losses = [_mean_loss(ex, point_name)]
    for _ in range(4):
        sgd.train(len(data), sampler)
        sampler.reset()
        losses.append(_mean_loss(ex, point_name))
    assert losses[-1] < 1e-3 < losses[0]
    weight, bias = sorted(ex.network.fetch_tensors(net.get_params()), key=np.size, reverse=True)
    np.testing.assert_allclose(np.ravel(weight), [3.0, -2.0], atol=0.05)
    np.testing.assert_allclose(np.ravel(bias), [0.5], atol=0.05)
