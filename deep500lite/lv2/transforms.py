"""Level 2: network transformations, reached as ``d5.transforms``.

Deep500 offers transformations of a network or its training step; deep500lite has one so far:

- :func:`microbatch` (``d5.transforms.microbatch(optimizer_or_executor_or_network, n)``): one
  training step as ``n`` micro-batches with accumulated gradients, then one update
  (:mod:`deep500lite.lv2.microbatch`).
"""

from deep500lite.lv2.microbatch import (MicrobatchExecutor, MicrobatchOptimizer, combine_outputs, loss_reduction,
                                        microbatch, relax_batch_dimension, split_batch)

__all__ = ["microbatch", "MicrobatchOptimizer", "MicrobatchExecutor", "split_batch", "combine_outputs",
           "loss_reduction", "relax_batch_dimension"]
