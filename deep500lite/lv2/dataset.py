"""Level 2: datasets (Deep500's ``Dataset``, ``NumpyDataset`` and ``FileListDataset``)."""

from __future__ import annotations

import abc

import numpy as np

from deep500lite.errors import UserError, UserTypeError

__all__ = ["Dataset", "NumpyDataset", "FileListDataset"]


class Dataset(abc.ABC):
    """A finite, indexable collection of samples.

    Args:
        input_node: the network input the samples feed. Deep500's subclasses call
            ``super().__init__()`` with no arguments and set ``self.input_node`` afterwards; that
            works too (both nodes start as None).
        label_node: the network input the labels feed (None for unlabelled data).
    """

    def __init__(self, input_node: str | None = None, label_node: str | None = None):
        self.input_node = input_node
        self.label_node = label_node

    @abc.abstractmethod
    def __getitem__(self, index) -> dict[str, np.ndarray]:
        """Return a batch as a dict of feeds.

        Args:
            index: an integer array (or slice) of sample indices.

        Returns:
            ``{input_node: samples, label_node: labels}``, each with the indexed samples stacked
            along a new first axis.
        """

    @abc.abstractmethod
    def __len__(self) -> int:
        """Return the number of samples."""


class NumpyDataset(Dataset):
    """A dataset held in numpy arrays.

    Args:
        data: samples, first axis indexing them.
        input_node: the network input the samples feed.
        labels: one label per sample, or None.
        label_node: the network input the labels feed.

    Raises:
        UserError: labels whose count differs from the samples', or labels without a ``label_node``.
    """

    def __init__(self, data: np.ndarray, input_node: str, labels: np.ndarray | None = None,
                 label_node: str | None = None):
        super().__init__(input_node, label_node)
        data = np.asarray(data)
        if labels is not None:
            labels = np.asarray(labels)
            if len(labels) != len(data):
                raise UserError(
                    f"NumpyDataset needs one label per sample. Received: {len(data)} samples, {len(labels)} labels."
                )
            if label_node is None:
                raise UserError("NumpyDataset was given labels but no label_node to feed them to: pass "
                                "label_node= (the network input the labels feed). Received: label_node=None")
        self.data, self.labels = data, labels

    def __getitem__(self, index):
        batch = {self.input_node: self.data[index]}
        if self.labels is not None:
            batch[self.label_node] = self.labels[index]
        return batch

    def __len__(self):
        return len(self.data)


class FileListDataset(Dataset):
    """A dataset of files (or any items) turned into samples by a loader, one item at a time.

    Args:
        data: the items (file names, say), first axis indexing them.
        input_node: the network input the samples feed (Deep500's ``data_node``).
        loader: ``loader(item) -> np.ndarray``, called for every item a batch holds.
        labels: one label per item, or None.
        label_node: the network input the labels feed.

    Raises:
        UserTypeError: ``loader`` is not callable.
        UserError: labels whose count differs from the items', or labels without a ``label_node``.
    """

    def __init__(self, data, input_node: str, loader, labels=None, label_node: str | None = None):
        if not callable(loader):
            raise UserTypeError(f"FileListDataset needs a callable loader(item) -> array. Received: {loader!r}")
        self._items = NumpyDataset(np.asarray(data), input_node, labels, label_node)
        super().__init__(input_node, label_node)
        self.data, self.labels, self.loader = self._items.data, self._items.labels, loader

    def __getitem__(self, index):
        batch = self._items[index]
        items = batch[self.input_node]
        if np.ndim(items) == 0:
            batch[self.input_node] = np.asarray(self.loader(items.item() if hasattr(items, "item") else items))
        else:
            batch[self.input_node] = np.stack([np.asarray(self.loader(i)) for i in items.tolist()])
        return batch

    def __len__(self):
        return len(self.data)
