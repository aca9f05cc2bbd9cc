"""A distributed recipe that cannot be imported on rank 1 of a job (for the job-end tests of ``run -n``)."""

import os

import deep500lite as d5

if os.environ.get("PMI_RANK") == "1":
    raise ImportError("rank 1 cannot import this recipe on purpose")

FIXED = {'dataset': 'digits', 'model': 'mlp', 'model_kwargs': dict(hidden=(8,)), 'epochs': 1,
         'executor': 'reference', 'optimizer': 'GradientDescent', 'distributed': 'ConsistentDecentralized'}
MUTABLE = {'batch_size': 32}
METRICS = [(d5.TestAccuracy(), None)]
