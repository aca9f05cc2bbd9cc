"""Dataset loaders: ``load_dataset(name, input_node, label_node)``, ``dataset_shape(name)``, ``dataset_loss(name)``.

The catalog of named datasets (digits, synthetic, MNIST IDX, CIFAR binary, image folders, packed
shards) and its losses are in :mod:`deep500lite.datasets.catalog`; the file formats in
:mod:`~deep500lite.datasets.formats`, :mod:`~deep500lite.datasets.shards`,
:mod:`~deep500lite.datasets.tfrecord` and :mod:`~deep500lite.datasets.tokens`; Deep500's per-dataset
functions in :mod:`~deep500lite.datasets.deep500_loaders`. This package re-exports them.
"""

from deep500lite.datasets import catalog
from deep500lite.datasets.catalog import *  # noqa: F401,F403 - the catalog's names are the package's

__all__ = list(catalog.__all__)
