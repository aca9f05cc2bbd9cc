"""Spatial parallelism from a recipe: a few seconds of training, the same losses on any number of ranks.

What it measures: LeNet on synthetic 24x24 images with every sample split along its height over the
ranks: halo rows exchanged before each convolution and pool (forward and backward), the convolution
weight gradients allreduced, the fully connected tail run on the gathered activations; each rank's
step time splits into compute, halo, allreduce, gather and idle. Two epochs of 8 steps (256 training
samples, batch 32), momentum SGD (the reference ``MomentumOptimizer``, applied on each rank to the
parameters it holds). Every rank reads the same batches, so the losses equal those of a one-process
run of this recipe within float32 round-off. The acceptable metric is a final test accuracy of at
least 40% (4 classes).

How to run it:

    deep500lite run recipes/parallel_spatial.py -n 2
    deep500lite run recipes/parallel_spatial.py -n 3 --set communicator=torch
    deep500lite run recipes/parallel_spatial.py -n 4 --set distributed=hybrid \
        --set "distributed_kwargs={'spatial_ranks': 2}"   # 2 data-parallel groups of 2 spatial ranks
    deep500lite run recipes/parallel_spatial.py            # one rank, in this process

The bundled copy runs by name too: ``deep500lite run parallel_spatial -n 2``.
"""

import deep500lite as d5
from deep500lite.frameworks import reference as d5ref
from deep500lite.recipe import run_recipe

# Fixed components: what every run of this benchmark shares.
FIXED = {
    'dataset': 'synthetic',
    'dataset_kwargs': dict(shape=(1, 24, 24), classes=4, train_size=256, test_size=64, separation=2.0),
    'model': 'lenet',
    'model_kwargs': dict(),
}

# Mutable components: what a run may change (deep500lite run --set KEY=VALUE).
MUTABLE = {
    'epochs': 2,
    'batch_size': 32,  # the whole batch, on every rank
    'executor': 'torch',
    'optimizer': d5ref.MomentumOptimizer,
    'optimizer_kwargs': dict(learning_rate=0.005, momentum=0.9),
    'distributed': 'spatial',
    'distributed_kwargs': dict(overlap=True),
    'communicator': 'mpi',
    'microbatches': 1,  # with distributed=None or 'data': each step as n micro-batches
}

# Acceptable metrics: the final test accuracy must reach 40% on every rank (higher is better).
METRICS = [
    (d5.TestAccuracy(), 40),
]

if __name__ == '__main__':
    run_recipe(FIXED, MUTABLE, METRICS) or exit(1)
