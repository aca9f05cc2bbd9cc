"""The recipe of the interruption trials: the zoo's MLP on scikit-learn's digits, 3 epochs, data-parallel
(so that ``run``, ``compare`` and ``run -n 2`` all take it); a few seconds a run on a CPU core."""

import deep500lite as d5

FIXED = {'dataset': 'digits', 'model': 'mlp', 'model_kwargs': dict(hidden=(64,)), 'epochs': 3,
         'optimizer': 'GradientDescent', 'distributed': 'ConsistentDecentralized'}
MUTABLE = {'batch_size': 32, 'executor': 'reference'}
METRICS = [(d5.TestAccuracy(), None)]
