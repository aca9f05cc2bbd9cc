"""Datasets, loaded through :func:`load_dataset` as ``(train, test)`` :class:`~deep500lite.Dataset` pairs.

Nothing is downloaded: ``digits`` comes with scikit-learn, ``synthetic`` is generated, and the
others are read from files in a root folder (``root=``, else ``$DEEP500LITE_DATA/<name>``, else
``~/.cache/deep500lite/data/<name>``). A missing file raises
:class:`~deep500lite.datasets.common.MissingDatasetError` naming the exact path expected and where
the file comes from; a damaged one raises :class:`~deep500lite.datasets.common.CorruptFileError`
naming the file and the fault.

Images are served channels-first, ``(C, H, W)``, as float32 in [0, 1] (the stored byte / 255);
labels are int64 class indices. See ``docs/datasets.md``.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import os

import numpy as np
import onnx

from deep500lite.datasets.common import (DATA_ENV, CorruptFileError, MissingDatasetError, UInt8ImageDataset,
                                         check_generated_size, check_seed, default_root, missing_file_error,
                                         resolve_root)
from deep500lite.datasets.formats import (ImageFolderDataset, read_cifar_batch, read_idx, scan_image_folder)
from deep500lite.datasets.shards import ShardDataset, read_shard_header, verify_shard, write_shards
from deep500lite.datasets.tokens import synthetic_tokens, synthetic_tokens_shape
from deep500lite.datasets.tfrecord import (crc32c, masked_crc32c, parse_example, read_tfrecord, serialize_example,
                                           write_tfrecord)
from deep500lite.datasets.deep500_loaders import (cifar10_loss, cifar10_shape, cifar100_loss, cifar100_shape,
                                                  cifar_mean, cifar_std, fashion_mnist_loss, fashion_mnist_shape,
                                                  load_cifar10, load_cifar100, load_fashion_mnist, load_mnist,
                                                  mnist_loss, mnist_shape)
from deep500lite.errors import DatasetNotAvailableError, FrameworkNotAvailableError, UserError, format_choices
from deep500lite.lv0.tensordesc import TensorDescriptor
from deep500lite.lv2.dataset import NumpyDataset

__all__ = ["load_dataset", "dataset_shape", "dataset_loss", "list_datasets", "detect_dataset", "LossOperation",
           "SoftmaxCrossEntropy", "DATA_ENV", "default_root", "MissingDatasetError", "CorruptFileError",
           "UInt8ImageDataset", "ImageFolderDataset", "ShardDataset", "write_shards", "read_shard_header",
           "verify_shard", "read_idx", "read_cifar_batch", "read_tfrecord", "write_tfrecord", "parse_example",
           "serialize_example", "crc32c", "masked_crc32c", "SOURCES", "DATASET_PACKAGES",
           # Deep500's per-dataset functions
           "load_mnist", "load_fashion_mnist", "load_cifar10", "load_cifar100", "mnist_shape", "fashion_mnist_shape",
           "cifar10_shape", "cifar100_shape", "mnist_loss", "fashion_mnist_loss", "cifar10_loss", "cifar100_loss",
           "cifar_mean", "cifar_std"]


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


# Where each file-based dataset comes from (shown when its files are missing).
SOURCES = {
    "mnist": "download train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and "
             "t10k-labels-idx1-ubyte.gz from http://yann.lecun.com/exdb/mnist/ (mirror: "
             "https://ossci-datasets.s3.amazonaws.com/mnist/); gzip-compressed or not, both are read.",
    "fashion_mnist": "download train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz "
                     "and t10k-labels-idx1-ubyte.gz from https://github.com/zalandoresearch/fashion-mnist (files "
                     "at http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/); gzip-compressed or not.",
    "cifar10": "download the binary version, https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz, and "
               "extract it (tar xzf cifar-10-binary.tar.gz) to get cifar-10-batches-bin/ with data_batch_1.bin .. "
               "data_batch_5.bin and test_batch.bin.",
    "cifar100": "download the binary version, https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz, and "
                "extract it (tar xzf cifar-100-binary.tar.gz) to get cifar-100-binary/ with train.bin and "
                "test.bin.",
    "imagefolder": "put your images there, e.g. ImageNet's (https://image-net.org/download.php; sort its val/ "
                   "images into class folders like train/).",
}

_IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
              "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
_CIFAR = {  # name -> (subfolder of the extracted archive, train files, test files, label bytes' classes)
    "cifar10": ("cifar-10-batches-bin", [f"data_batch_{i}.bin" for i in range(1, 6)], ["test_batch.bin"], (10,)),
    "cifar100": ("cifar-100-binary", ["train.bin"], ["test.bin"], (20, 100)),
}
_CIFAR100_LABELS = {"fine": (1, 100), "coarse": (0, 20)}  # label_mode -> (label byte, classes)


#: Optional packages a dataset's loader imports: name -> ((import name, what it is, pip extra), ...).
DATASET_PACKAGES = {
    "digits": (("sklearn", "scikit-learn", "datasets"),),
    "imagefolder": (("PIL", "pillow", "datasets"),),
}


def _no_root(name, root):
    if root is not None:
        raise UserError(f"Dataset {name!r} reads no files, so root= does not apply. Received: root={root!r}")


def _digits(input_node, label_node, root=None, seed=0, test_fraction=0.25):
    _no_root("digits", root)
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise FrameworkNotAvailableError(
            "Dataset 'digits' needs scikit-learn, which is not installed: pip install 'deep500lite[datasets]'") from exc
    if not isinstance(test_fraction, (int, float, np.integer, np.floating)) or not 0 < test_fraction < 1:
        raise UserError(f"test_fraction must be in (0, 1). Received: {test_fraction!r}")
    check_seed(seed, "digits")
    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return (NumpyDataset(x[train], input_node, y[train], label_node),
            NumpyDataset(x[test], input_node, y[test], label_node))


def _synthetic_args(shape, classes, train_size=1, test_size=1):
    from deep500lite.options import Integer, ListOf

    # each dimension an integer (2.5 is refused, not cut to 2), at most 2**31 - 1
    dims = ListOf(Integer(minimum=1, maximum=2**31 - 1), min_items=1, max_items=32)
    try:
        shape = tuple(dims.check(list(shape) if isinstance(shape, (tuple, list)) else shape, "synthetic: shape"))
    except UserError:
        raise UserError(f"synthetic: shape must be a non-empty sequence of positive integers (at most 32 of them). "
                        f"Received: {shape!r}") from None
    for key, value, low in (("classes", classes, 2), ("train_size", train_size, 1), ("test_size", test_size, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise UserError(f"synthetic: {key} must be an integer >= {low}. Received: {value!r}")
    return shape


def _synthetic(input_node, label_node, root=None, seed=0, shape=(1, 28, 28), classes=10, train_size=1024,
               test_size=256, separation=1.0):
    _no_root("synthetic", root)
    shape = _synthetic_args(shape, classes, train_size, test_size)
    if not isinstance(separation, (int, float, np.integer, np.floating)) or isinstance(separation, bool):
        raise UserError(f"synthetic: separation must be a number. Received: {separation!r}")
    if not np.isfinite(separation):
        raise UserError(f"synthetic: separation must be a finite number. Received: {separation!r}")
    check_seed(seed, "synthetic")
    # float64 normal draws, then float32: about 12 bytes per value at the peak
    check_generated_size(12 * math.prod(shape) * (classes + train_size + test_size),
                         f"synthetic (shape {list(shape)}, classes {classes}, train_size {train_size}, "
                         f"test_size {test_size})")
    rng = np.random.default_rng(seed)
    # Each class has a fixed random pattern; a sample is its class's pattern (times `separation`)
    # plus standard normal noise, so networks can learn the classes.
    patterns = rng.standard_normal((classes, *shape)).astype(np.float32)

    def make(n):
        y = rng.integers(0, classes, size=n).astype(np.int64)
        x = rng.standard_normal((n, *shape)).astype(np.float32) + np.float32(separation) * patterns[y]
        return x, y

    (xa, ya), (xb, yb) = make(train_size), make(test_size)
    return NumpyDataset(xa, input_node, ya, label_node), NumpyDataset(xb, input_node, yb, label_node)


def _idx_split(name, root, split, root_given):
    images_name, labels_name = _IDX_FILES[split]
    images_path = _find_file(name, root, images_name, root_given, gz=True)
    labels_path = _find_file(name, root, labels_name, root_given, gz=True)
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise CorruptFileError(images_path, f"an image file holds uint8 [N, rows, cols]; this one holds "
                                            f"{images.dtype}{list(images.shape)}")
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise CorruptFileError(labels_path, f"a label file holds uint8 [N]; this one holds "
                                            f"{labels.dtype}{list(labels.shape)}")
    if len(images) != len(labels):
        raise CorruptFileError(labels_path, f"it has {len(labels)} labels but '{images_path}' has {len(images)} "
                                            "images")
    if labels.size and labels.max() > 9:
        i = int(np.argmax(labels > 9))
        raise CorruptFileError(labels_path, f"label {i} is {labels[i]}, not a class in 0..9", offset=8 + i)
    return images[:, None], labels


def _find_file(name, root, filename, root_given, gz=False):
    for candidate in (filename, filename + ".gz") if gz else (filename,):
        path = os.path.join(root, candidate)
        if os.path.isfile(path):
            return path
    raise missing_file_error(name, os.path.join(root, filename), SOURCES[name], root_given,
                             also=f"or '{filename}.gz'" if gz else "")


def _mnist_like(name):
    def load(input_node, label_node, root=None):
        folder = resolve_root(name, root)
        out = []
        for split in ("train", "test"):
            images, labels = _idx_split(name, folder, split, root is not None)
            out.append(UInt8ImageDataset(images, input_node, labels, label_node, classes=10))
        return tuple(out)
    load.__name__ = f"_{name}"
    return load


def _cifar_folder(name, root):
    sub = os.path.join(root, _CIFAR[name][0])
    first = _CIFAR[name][1][0]
    if not os.path.isfile(os.path.join(root, first)) and os.path.isfile(os.path.join(sub, first)):
        return sub
    return root


def _cifar(name):
    def load(input_node, label_node, root=None, label_mode="fine"):
        _, train_files, test_files, classes = _CIFAR[name]
        if name == "cifar100":
            if label_mode not in _CIFAR100_LABELS:
                raise UserError(f"cifar100: label_mode must be one of {format_choices(_CIFAR100_LABELS)}. "
                                f"Received: {label_mode!r}")
            column, n_classes = _CIFAR100_LABELS[label_mode]
        else:
            if label_mode != "fine":
                raise UserError(f"cifar10 has one label per image; label_mode applies to cifar100 only. "
                                f"Received: label_mode={label_mode!r}")
            column, n_classes = 0, 10
        folder = _cifar_folder(name, resolve_root(name, root))
        out = []
        for files in (train_files, test_files):
            paths = [_find_file(name, folder, f, root is not None) for f in files]
            parts = [read_cifar_batch(p, len(classes), classes) for p in paths]
            images = np.concatenate([p[0] for p in parts])
            labels = np.concatenate([p[1][:, column] for p in parts]).astype(np.int64)
            out.append(UInt8ImageDataset(images, input_node, labels, label_node, classes=n_classes))
        return tuple(out)
    load.__name__ = f"_{name}"
    return load


def _imagefolder_splits(root, root_given):
    train = os.path.join(root, "train")
    if not os.path.isdir(train):
        how = ("" if root_given else f" The classes and image size come from these files: pass root=DIR (CLI: "
               f"--root DIR), or set {DATA_ENV}=PARENT to read PARENT/imagefolder.")
        raise MissingDatasetError(f"Dataset 'imagefolder' reads images in the ImageNet layout ROOT/train/<class>/"
                                  f"<image> and ROOT/val/<class>/<image>; the folder '{train}' does not exist. "
                                  f"deep500lite downloads nothing: {SOURCES['imagefolder']}{how}")
    for name in ("val", "test"):
        if os.path.isdir(os.path.join(root, name)):
            return train, os.path.join(root, name)
    raise MissingDatasetError(f"Dataset 'imagefolder' needs a test split next to '{train}': the folder "
                              f"'{os.path.join(root, 'val')}' (or '{os.path.join(root, 'test')}') does not exist; "
                              f"it holds <class>/<image> like train/.")


def _imagefolder(input_node, label_node, root=None, image_size=None, channels=3):
    folder = resolve_root("imagefolder", root)
    train_dir, test_dir = _imagefolder_splits(folder, root is not None)
    classes, files, labels = scan_image_folder(train_dir)
    _, test_files, test_labels = scan_image_folder(test_dir, classes)
    return (ImageFolderDataset(files, labels, input_node, label_node, classes, image_size, channels),
            ImageFolderDataset(test_files, test_labels, input_node, label_node, classes, image_size, channels))


def _shards(input_node, label_node, root=None, verify=False):
    from deep500lite.datasets.shards import _open_split

    if not isinstance(verify, (bool, np.bool_)):
        raise UserError(f"shards: verify must be True or False. Received: verify={verify!r}")

    folder = resolve_root("shards", root)
    return tuple(_open_split(folder, split, input_node, label_node, root is not None, verify)
                 for split in ("train", "test"))


# name -> loader(input_node, label_node, root=None, **options)
_DATASETS = {
    "digits": _digits,
    "mnist": _mnist_like("mnist"),
    "fashion_mnist": _mnist_like("fashion_mnist"),
    "cifar10": _cifar("cifar10"),
    "cifar100": _cifar("cifar100"),
    "imagefolder": _imagefolder,
    "synthetic": _synthetic,
    "synthetic_tokens": synthetic_tokens,
    "shards": _shards,
}


def list_datasets() -> list[str]:
    """Names of the datasets :func:`load_dataset` knows."""
    return sorted(_DATASETS)


# Datasets Deep500 loaded that have no loader here: what Deep500 read them from.
_DEEP500_ONLY = {
    "imagenet": "ILSVRC2012 as TFRecord files, through TensorFlow",
    "ucf101": "UCF101's videos, through PyAV",
}


def _entry(name):
    if isinstance(name, str) and name in _DEEP500_ONLY:
        raise DatasetNotAvailableError(
            f"deep500lite has no loader for Deep500's dataset {name!r} (Deep500 read {_DEEP500_ONLY[name]}). "
            f"Load its images with 'imagefolder' (a folder per class) or 'shards' (packed files) instead. "
            f"Received: {name!r}")
    if not isinstance(name, str) or name not in _DATASETS:
        close = difflib.get_close_matches(name, list_datasets(), n=1) if isinstance(name, str) else []
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UserError(f"Unknown dataset {name!r}. Known datasets: {format_choices(list_datasets())}.{hint} "
                        f"Received: {name!r}")
    return _DATASETS[name]


def _options(name, kwargs):
    params = inspect.signature(_entry(name)).parameters
    allowed = [p for p in params if p not in ("input_node", "label_node", "root")]
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise UserError(f"Dataset {name!r} has no option(s) {unknown}. Its options are "
                        f"{format_choices(allowed) or 'none'}. Received: {format_choices(sorted(kwargs))}")
    return {p: params[p].default for p in allowed} | kwargs


def dataset_shape(name: str, root=None, **kwargs) -> tuple:
    """``(classes, *sample_shape)`` of a dataset.

    Args:
        name: one of :func:`list_datasets`.
        root: the dataset's folder; only ``imagefolder`` and ``shards`` read it (their classes and
            sample shape come from the files).
        **kwargs: the options that change the shape: ``shape`` and ``classes`` for ``synthetic``,
            ``label_mode`` for ``cifar100``, ``image_size`` and ``channels`` for ``imagefolder``.

    Raises:
        UserError: an unknown name or option; MissingDatasetError when ``imagefolder`` or
            ``shards`` files are not found.
    """
    opts = _options(name, kwargs)
    if name in ("mnist", "fashion_mnist"):
        return (10, 1, 28, 28)
    if name == "cifar10":
        return (10, 3, 32, 32)
    if name == "cifar100":
        if opts["label_mode"] not in _CIFAR100_LABELS:
            raise UserError(f"cifar100: label_mode must be one of {format_choices(_CIFAR100_LABELS)}. "
                            f"Received: {opts['label_mode']!r}")
        return (_CIFAR100_LABELS[opts["label_mode"]][1], 3, 32, 32)
    if name == "digits":
        return (10, 1, 8, 8)
    if name == "synthetic":
        shape = _synthetic_args(opts["shape"], opts["classes"])
        return (int(opts["classes"]), *shape)
    if name == "synthetic_tokens":
        return synthetic_tokens_shape(**{k: v for k, v in opts.items() if k != "seed"})
    if name == "imagefolder":
        train, _ = _load_only_train(name, root, opts)
        return (train.classes, *train.sample_shape())
    header = read_shard_header(_shard_train_path(root))
    return (header["classes"], *header["fields"][0]["shape"])


def _load_only_train(name, root, opts):
    folder = resolve_root(name, root)
    train_dir, _ = _imagefolder_splits(folder, root is not None)
    classes, files, labels = scan_image_folder(train_dir)
    return ImageFolderDataset(files, labels, "input", "label", classes, opts["image_size"], opts["channels"]), None


def _shard_train_path(root):
    from deep500lite.datasets.shards import shard_path

    path = shard_path(resolve_root("shards", root), "train")
    if not os.path.isfile(path):
        raise missing_file_error("shards", path, "make shard files from another dataset with `deep500lite pack "
                                 f"NAME_OR_DIR {os.path.dirname(path)}`.", root is not None)
    return path


def dataset_loss(name: str) -> SoftmaxCrossEntropy:
    """The loss constructor suited to a dataset (softmax cross-entropy for classification)."""
    _entry(name)
    return SoftmaxCrossEntropy()


def load_dataset(name: str, input_node: str, label_node: str, root=None, batch_size=None, **kwargs):
    """Load a dataset as ``(train, test)`` :class:`~deep500lite.Dataset` objects.

    Batches are ``{input_node: samples, label_node: labels}``: images float32 ``(N, C, H, W)``
    in [0, 1], labels int64.

    Args:
        name: one of :func:`list_datasets`: ``digits``, ``mnist``, ``fashion_mnist``, ``cifar10``,
            ``cifar100``, ``imagefolder``, ``synthetic`` or ``shards``.
        input_node: the network input the samples feed.
        label_node: the network input the labels feed.
        root: the folder holding the dataset's files (default ``$DEEP500LITE_DATA/<name>``, else
            ``~/.cache/deep500lite/data/<name>``); not for ``digits`` and ``synthetic``.
        **kwargs: dataset options: ``seed`` and ``test_fraction`` (digits); ``seed``, ``shape``,
            ``classes``, ``train_size``, ``test_size``, ``separation`` (synthetic); ``label_mode``
            ``"fine"`` or ``"coarse"`` (cifar100); ``image_size`` (int or (H, W)) and ``channels``
            (3 or 1) (imagefolder); ``verify`` (shards: check record CRCs on every read).
        batch_size: ignored; accepted because Deep500's ``load_dataset`` took it (its ImageNet
            loader returned a sampler).

    Raises:
        UserError: an unknown dataset or option.
        MissingDatasetError: a file that is not where it is looked for (the message names the
            exact path and where the file comes from).
        CorruptFileError: a damaged file (names the file and the fault).
    """
    if isinstance(name, str):
        name = name.strip().lower()
    opts = _options(name, kwargs)
    return _entry(name)(input_node, label_node, root=root, **opts)


def detect_dataset(folder) -> str | None:
    """The dataset whose files ``folder`` holds (``mnist``, ``cifar10``, ``cifar100``, ``imagefolder``,
    ``shards``), or None. MNIST and Fashion-MNIST share file names; ``mnist`` is returned for both."""
    folder = os.fspath(folder)
    has = lambda *p: os.path.exists(os.path.join(folder, *p))  # noqa: E731
    if has("train.d5shard"):
        return "shards"
    if has("train-images-idx3-ubyte") or has("train-images-idx3-ubyte.gz"):
        return "mnist"
    if has("data_batch_1.bin") or has("cifar-10-batches-bin", "data_batch_1.bin"):
        return "cifar10"
    if has("train.bin") or has("cifar-100-binary", "train.bin"):
        return "cifar100"
    if os.path.isdir(os.path.join(folder, "train")):
        return "imagefolder"
    return None
