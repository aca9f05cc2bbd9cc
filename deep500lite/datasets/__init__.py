"""Datasets, loaded through :func:`load_dataset`.

Nothing is downloaded: ``digits`` comes with scikit-learn and ``synthetic`` is generated.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx

from deep500lite.errors import UserError, format_choices
from deep500lite.lv0.tensordesc import TensorDescriptor
from deep500lite.lv2.dataset import NumpyDataset

__all__ = ["load_dataset", "dataset_shape", "dataset_loss", "list_datasets", "LossOperation",
           "SoftmaxCrossEntropy"]


@dataclasses.dataclass
class LossOperation:
    """ONNX nodes computing a loss, with the descriptors of the inputs they add (the labels)."""

    nodes: list
    new_inputs: dict


class SoftmaxCrossEntropy:
    """Loss constructor: ``SoftmaxCrossEntropy()([logits, labels], "loss")`` (mean reduction).

    Labels are int64 class indices, one per sample.
    """

    def __call__(self, inputs, output: str = "loss") -> LossOperation:
        if len(inputs) != 2:
            raise UserError(f"The loss takes [prediction, label] node names. Received: {inputs!r}")
        pred, label = inputs
        node = onnx.helper.make_node("SoftmaxCrossEntropyLoss", [pred, label], [output],
                                     name=f"{output}_sce", reduction="mean")
        return LossOperation([node], {label: TensorDescriptor(np.int64, (None,))})


def _digits(input_node, label_node, seed=0, test_fraction=0.25, **kwargs):
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise ImportError("Dataset 'digits' needs scikit-learn: pip install 'deep500lite[datasets]'") from exc
    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return (NumpyDataset(x[train], input_node, y[train], label_node),
            NumpyDataset(x[test], input_node, y[test], label_node))


def _synthetic(input_node, label_node, seed=0, shape=(1, 28, 28), classes=10, train_size=1024,
               test_size=256, **kwargs):
    rng = np.random.default_rng(seed)
    def make(n):
        return (rng.standard_normal((n, *shape)).astype(np.float32),
                rng.integers(0, classes, size=n).astype(np.int64))
    (xa, ya), (xb, yb) = make(train_size), make(test_size)
    return NumpyDataset(xa, input_node, ya, label_node), NumpyDataset(xb, input_node, yb, label_node)


# name -> (loader, (classes, *sample shape))
_DATASETS = {
    "digits": (_digits, (10, 1, 8, 8)),
    "synthetic": (_synthetic, (10, 1, 28, 28)),
}


def list_datasets() -> list[str]:
    """Names of the datasets :func:`load_dataset` knows."""
    return sorted(_DATASETS)


def _entry(name):
    if name not in _DATASETS:
        raise UserError(f"Unknown dataset {name!r}. Known datasets: {format_choices(list_datasets())}.")
    return _DATASETS[name]


def dataset_shape(name: str) -> tuple:
    """``(classes, *sample_shape)`` of a dataset."""
    return _entry(name)[1]


def dataset_loss(name: str) -> SoftmaxCrossEntropy:
    """The loss constructor suited to a dataset (softmax cross-entropy for classification)."""
    _entry(name)
    return SoftmaxCrossEntropy()


def load_dataset(name: str, input_node: str, label_node: str, root=None, **kwargs):
    """Load a dataset as ``(train, test)`` :class:`~deep500lite.Dataset` objects.

    Args:
        name: one of :func:`list_datasets`.
        input_node: the network input the samples feed.
        label_node: the network input the labels feed.
        root: the folder holding the dataset's files (for datasets read from files).
        **kwargs: dataset options (``seed``; for ``synthetic`` also ``shape``, ``classes``,
            ``train_size``, ``test_size``).
    """
    return _entry(name)[0](input_node, label_node, **kwargs)
