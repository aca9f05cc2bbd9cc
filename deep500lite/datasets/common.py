"""Where dataset files live, and the errors raised when they are missing or damaged.

deep500lite downloads nothing. A dataset read from files looks in its *root* folder:
``root=`` when given, else ``$DEEP500LITE_DATA/<name>`` when that variable is set, else
``~/.cache/deep500lite/data/<name>``.
"""

from __future__ import annotations

import os

import numpy as np

from deep500lite.errors import (CorruptFileError, MissingDatasetError,  # noqa: F401 - re-exported here
                                UserError, UserTypeError)
from deep500lite.lv2.dataset import Dataset
from deep500lite.utils import check_allocation

__all__ = ["DATA_ENV", "default_root", "resolve_root", "MissingDatasetError", "CorruptFileError",
           "missing_file_error", "read_file_bytes", "UInt8ImageDataset", "check_seed", "check_generated_size"]

DATA_ENV = "DEEP500LITE_DATA"


def default_root(name: str) -> str:
    """The folder a dataset's files are looked for in when no ``root=`` is given.

    Args:
        name: the dataset's name (``mnist``, ``cifar10``, ...).

    Returns:
        ``$DEEP500LITE_DATA/<name>`` when the variable is set, else ``~/.cache/deep500lite/data/<name>``.
    """
    base = os.environ.get(DATA_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "deep500lite", "data")
    return os.path.join(base, name)


def resolve_root(name: str, root) -> str:
    """``root`` as an absolute path, or :func:`default_root` of ``name`` when ``root`` is None.

    Raises:
        UserTypeError: ``root`` is not a path (str or os.PathLike).
        UserError: ``root``, or the folder ``$DEEP500LITE_DATA`` names, is an existing file, not a folder.
    """
    if root is None:
        base = os.environ.get(DATA_ENV)
        if base and os.path.exists(base) and not os.path.isdir(base):
            raise UserError(f"{DATA_ENV} must name a folder holding one folder per dataset ({DATA_ENV}/{name}); "
                            f"'{base}' is a file. Received: {DATA_ENV}={base!r}")
        return default_root(name)
    if isinstance(root, bytes) or not isinstance(root, (str, os.PathLike)):
        raise UserTypeError(f"root must be a folder path (str or os.PathLike). Received: root={root!r}")
    folder = os.path.abspath(os.path.expanduser(os.fspath(root)))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UserError(f"root must be the folder holding the {name!r} files; '{folder}' is a file. "
                        f"Received: root={os.fspath(root)!r}")
    return folder


def check_seed(seed, where: str) -> int:
    """``seed`` checked as numpy's generators need it: an integer >= 0.

    Args:
        seed: the seed given.
        where: the dataset, for the message.

    Raises:
        UserError: anything else (a negative number, a float, a string, a bool).
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UserError(f"{where}: seed must be an integer >= 0. Received: seed={seed!r}")
    return int(seed)


def check_generated_size(nbytes: int, where: str) -> None:
    """Refuse generated data that cannot fit in memory before numpy tries to allocate it."""
    check_allocation(nbytes, f"{where}: the generated samples")


def missing_file_error(dataset: str, path: str, source: str, root_given: bool, also: str = "") -> MissingDatasetError:
    """A :class:`MissingDatasetError` naming the exact path expected and where the file comes from.

    Args:
        dataset: the dataset's name.
        path: the path that was looked for.
        source: where the file comes from (a sentence with the official URL).
        root_given: whether the user passed ``root=`` (else the default root was used).
        also: other names accepted for the same file (e.g. ``"or the same name with .gz"``).
    """
    folder = os.path.dirname(path)
    how = ("" if root_given else
           f" Or point deep500lite at the folder holding them: root=DIR (deep500lite pack: --root DIR), or set "
           f"{DATA_ENV}=PARENT to read PARENT/{dataset}.")
    base = os.environ.get(DATA_ENV)
    if not root_given and base and not os.path.isdir(base):
        how += f" ({DATA_ENV} is set to '{base}', which does not exist.)"
    extra = f" ({also})" if also else ""
    return MissingDatasetError(
        f"Dataset {dataset!r} needs the file '{path}'{extra}, which does not exist. deep500lite downloads "
        f"nothing: {source} Put the file(s) in '{folder}'.{how}")


def read_file_bytes(path) -> bytes:
    """The whole content of a dataset file.

    Args:
        path: the file.

    Raises:
        MissingDatasetError: ``path`` does not exist.
        UserTypeError: ``path`` is not a path.
        UserError: ``path`` is a folder, a FIFO, a device, or cannot be read (no permission, ...).
    """
    from deep500lite.input_files import read_input_bytes

    return read_input_bytes(path, "Dataset file", missing=MissingDatasetError)


class UInt8ImageDataset(Dataset):
    """Images kept as uint8 (a quarter of the memory of float32) and served as float32 in [0, 1].

    A batch is ``{input_node: images[index] / 255 (float32), label_node: labels[index] (int64)}``.

    Args:
        images: uint8 array ``(N, C, H, W)``.
        input_node: the network input the images feed.
        labels: one integer label per image.
        label_node: the network input the labels feed.
        classes: the number of classes (kept for :func:`deep500lite.datasets.write_shards`).
    """

    def __init__(self, images: np.ndarray, input_node: str, labels: np.ndarray, label_node: str,
                 classes: int | None = None):
        super().__init__(input_node, label_node)
        if images.dtype != np.uint8:
            raise UserTypeError(f"UInt8ImageDataset holds uint8 images. Received: dtype {images.dtype}")
        if len(labels) != len(images):
            raise UserError(f"UInt8ImageDataset needs one label per image. Received: {len(images)} images, "
                            f"{len(labels)} labels.")
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)
        self.classes = classes

    @property
    def data(self) -> np.ndarray:
        """All images as float32 in [0, 1] (a new array, four times the size of :attr:`images`)."""
        return self.images.astype(np.float32) / np.float32(255)

    def __getitem__(self, index):
        return {self.input_node: self.images[index].astype(np.float32) / np.float32(255),
                self.label_node: self.labels[index]}

    def __len__(self):
        return len(self.images)
