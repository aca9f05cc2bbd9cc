"""Deep500's per-dataset functions: ``load_mnist``, ``load_cifar10``, ``mnist_shape``, ``cifar10_loss``, ...

They take Deep500's arguments and return what Deep500's returned (a ``(train, test)`` pair of
datasets), reading local files instead of downloading: ``root=`` (or Deep500's ``folder=`` for
CIFAR), else ``$DEEP500LITE_DATA/<name>``, else ``~/.cache/deep500lite/data/<name>``. A missing
file raises :class:`~deep500lite.errors.MissingDatasetError` naming the path and the download URL.

``normalize`` keeps Deep500's meaning: MNIST-like images are scaled by the set's minimum and
maximum (``(x - min) / (max - min)``, ``x / 255`` for real MNIST), CIFAR images are divided by
255 and then standardized per channel with :data:`cifar_mean` and :data:`cifar_std`.
``normalize=False`` gives MNIST's raw bytes (uint8) and CIFAR's images in ``[0, 1]``, as Deep500.
"""

from __future__ import annotations

import numpy as np

from deep500lite.errors import UserError
from deep500lite.lv2.dataset import NumpyDataset

__all__ = ["load_mnist", "load_fashion_mnist", "load_cifar10", "load_cifar100", "mnist_shape", "fashion_mnist_shape",
           "cifar10_shape", "cifar100_shape", "mnist_loss", "fashion_mnist_loss", "cifar10_loss", "cifar100_loss",
           "cifar_mean", "cifar_std"]

#: Per-channel means of the CIFAR training images in [0, 1] (Deep500's values).
cifar_mean = {"cifar10": (0.4914, 0.4822, 0.4465), "cifar100": (0.5071, 0.4867, 0.4408)}
#: Per-channel standard deviations of the CIFAR training images in [0, 1] (Deep500's values).
cifar_std = {"cifar10": (0.2023, 0.1994, 0.2010), "cifar100": (0.2675, 0.2565, 0.2761)}


def _flag(value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise UserError(f"normalize must be True or False. Received: normalize={value!r}")
    return bool(value)


def _check_extra(fn: str, kwargs: dict) -> None:
    # Deep500's loaders took (and ignored) batch_size, which its load_dataset passed to every loader.
    unknown = sorted(set(kwargs) - {"batch_size"})
    if unknown:
        raise UserError(f"{fn} has no option(s) {unknown}; it takes normalize and root (and ignores batch_size, "
                        f"as Deep500's did). Received: {', '.join(unknown)}")


def _mnist_like(name, data_node_name, label_node_name, normalize, root):
    from deep500lite.datasets import load_dataset

    normalize = _flag(normalize)
    out = []
    for part in load_dataset(name, data_node_name, label_node_name, root=root):
        images, labels = part.images, part.labels
        if not normalize:
            out.append(NumpyDataset(images, data_node_name, labels, label_node_name))
            continue
        low, high = (int(images.min()), int(images.max())) if images.size else (0, 255)
        if (low, high) == (0, 255):
            out.append(part)  # (x - 0) / 255: served from the bytes, a quarter of the memory
        else:
            scaled = (images.astype(np.float64) - low) / max(high - low, 1)
            out.append(NumpyDataset(scaled.astype(np.float32), data_node_name, labels, label_node_name))
    return tuple(out)


def load_mnist(data_node_name: str, label_node_name: str, normalize: bool = True, root=None, **kwargs):
    """MNIST's training and test sets, as Deep500's ``load_mnist`` returned them.

    Args:
        data_node_name: the network input the images feed.
        label_node_name: the network input the labels feed.
        normalize: scale the images to [0, 1] by the set's minimum and maximum (else raw uint8).
        root: the folder with the four IDX files (gzip-compressed or not).
        **kwargs: ``batch_size`` only, ignored (Deep500's ``load_dataset`` passed it along).

    Returns:
        ``(train, test)`` datasets; images ``(N, 1, 28, 28)``, labels int64.

    Raises:
        MissingDatasetError: a file is not there (the message names it and its URL).
    """
    _check_extra("load_mnist", kwargs)
    return _mnist_like("mnist", data_node_name, label_node_name, normalize, root)


def load_fashion_mnist(data_node_name: str, label_node_name: str, normalize: bool = True, root=None, **kwargs):
    """Fashion-MNIST's training and test sets (as :func:`load_mnist`, from the ``fashion_mnist`` folder)."""
    _check_extra("load_fashion_mnist", kwargs)
    return _mnist_like("fashion_mnist", data_node_name, label_node_name, normalize, root)


def _cifar(name, input_node_name, label_node_name, normalize, folder, root):
    from deep500lite.datasets import load_dataset

    normalize = _flag(normalize)
    if folder and root is not None:
        raise UserError(f"Give root or folder (Deep500's name), not both. Received: root={root!r}, folder={folder!r}")
    sets = load_dataset(name, input_node_name, label_node_name, root=root if root is not None else (folder or None))
    if not normalize:
        return sets
    mean = np.asarray(cifar_mean[name], np.float32)[:, None, None]
    std = np.asarray(cifar_std[name], np.float32)[:, None, None]
    return tuple(NumpyDataset((part.data - mean) / std, input_node_name, part.labels, label_node_name)
                 for part in sets)


def load_cifar10(input_node_name: str, label_node_name: str, normalize: bool = True, folder: str = "", root=None,
                 **kwargs):
    """CIFAR-10's training and test sets, as Deep500's ``load_cifar10`` returned them.

    Args:
        input_node_name: the network input the images feed.
        label_node_name: the network input the labels feed.
        normalize: standardize each channel with :data:`cifar_mean` and :data:`cifar_std`
            (else images in [0, 1]).
        folder: Deep500's folder for the files ('' for the default); the same as ``root``.
        root: the folder with the binary batches (or ``cifar-10-batches-bin/`` holding them).
        **kwargs: ``batch_size`` only, ignored.

    Returns:
        ``(train, test)`` datasets; images float32 ``(N, 3, 32, 32)``, labels int64.
    """
    _check_extra("load_cifar10", kwargs)
    return _cifar("cifar10", input_node_name, label_node_name, normalize, folder, root)


def load_cifar100(input_node_name: str, label_node_name: str, normalize: bool = True, folder: str = "", root=None,
                  **kwargs):
    """CIFAR-100's training and test sets with the fine labels (as :func:`load_cifar10`)."""
    _check_extra("load_cifar100", kwargs)
    return _cifar("cifar100", input_node_name, label_node_name, normalize, folder, root)


def mnist_shape() -> tuple:
    """``(classes, channels, height, width)`` of MNIST: ``(10, 1, 28, 28)``."""
    return (10, 1, 28, 28)


def fashion_mnist_shape() -> tuple:
    """``(10, 1, 28, 28)``."""
    return mnist_shape()


def cifar10_shape() -> tuple:
    """``(10, 3, 32, 32)``."""
    return (10, 3, 32, 32)


def cifar100_shape() -> tuple:
    """``(100, 3, 32, 32)`` (the fine labels)."""
    return (100, 3, 32, 32)


def _loss():
    from deep500lite.datasets import SoftmaxCrossEntropy

    return SoftmaxCrossEntropy()


def mnist_loss():
    """The loss constructor for MNIST (softmax cross-entropy), as ``dataset_loss('mnist')``."""
    return _loss()


def fashion_mnist_loss():
    """The loss constructor for Fashion-MNIST (softmax cross-entropy)."""
    return _loss()


def cifar10_loss():
    """The loss constructor for CIFAR-10 (softmax cross-entropy)."""
    return _loss()


def cifar100_loss():
    """The loss constructor for CIFAR-100 (softmax cross-entropy)."""
    return _loss()
