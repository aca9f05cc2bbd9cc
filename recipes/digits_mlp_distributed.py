"""Data-parallel training over MPI ranks: an MLP on scikit-learn's digits, any framework.

What it measures: the zoo's MLP (one hidden layer of 64) trained for 3 epochs on the 1,348
training digits, batch 32 per rank, momentum SGD from the numpy reference optimizers wrapped in
``ConsistentDecentralized`` (allreduce of the mean gradient each step, in buckets of ``bucket_mb``
MiB started during the backward pass where the executor allows; ``algorithm`` and ``bucket_mb``
mutable). Each rank trains on its own shard (``PartitionedDistributedSampler``, the default for
a distributed recipe) and evaluates the whole test set with its replica. The acceptable metric
is a final test accuracy of at least 80% on every rank (the global batch grows with the ranks,
so 4 ranks take a quarter of the steps: ~85% after 3 epochs). ``deep500lite run -n N`` adds, per
rank and for the job: step time split into compute and communication, bytes per step, and the
scaling efficiency against a 1-rank run of the same recipe.

How to run it:

    deep500lite run recipes/digits_mlp_distributed.py -n 2
    deep500lite run recipes/digits_mlp_distributed.py -n 4 --set distributed_kwargs.algorithm=ring
    deep500lite run recipes/digits_mlp_distributed.py -n 2 --set bucket_mb=0
    deep500lite run recipes/digits_mlp_distributed.py -n 2 --set distributed=ConsistentParameterServer \\
        --set distributed_kwargs={}
    deep500lite run recipes/digits_mlp_distributed.py            # one rank, in this process

The bundled copy runs by name too: ``deep500lite run digits_mlp_distributed -n 2``.
"""

import deep500lite as d5
from deep500lite.frameworks import reference as d5ref
from deep500lite.recipe import run_recipe

# Fixed components: what every run of this benchmark shares.
FIXED = {
    'dataset': 'digits',
    'model': 'mlp',
    'model_kwargs': dict(hidden=(64,)),
}

# Mutable components: what a run may change (deep500lite run --set KEY=VALUE).
MUTABLE = {
    'epochs': 3,
    'batch_size': 32,  # per rank
    'executor': 'torch',
    'optimizer': d5ref.MomentumOptimizer,
    'optimizer_kwargs': dict(learning_rate=0.05, momentum=0.9),
    'distributed': 'ConsistentDecentralized',
    'distributed_kwargs': dict(algorithm='native'),
    'bucket_mb': None,  # gradient buckets in MiB (None: the optimizer's 25; 0: one per gradient)
    'communicator': 'mpi',
}

# Acceptable metrics: the final test accuracy must reach 80% on every rank (higher is better).
METRICS = [
    (d5.TestAccuracy(), 80),
]

if __name__ == '__main__':
    run_recipe(FIXED, MUTABLE, METRICS) or exit(1)
