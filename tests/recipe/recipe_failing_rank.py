"""A distributed recipe whose rank 1 raises in its first step (for the failure test of ``run -n``)."""

import deep500lite as d5
from deep500lite.lv3 import ConsistentDecentralized


class FailOnRank1(ConsistentDecentralized):
    def step(self, inputs):
        if self.communication.rank == 1:
            raise RuntimeError("rank 1 fails on purpose")
        return super().step(inputs)


FIXED = {'dataset': 'digits', 'model': 'mlp', 'model_kwargs': dict(hidden=(8,)), 'epochs': 1,
         'executor': 'reference', 'optimizer': 'GradientDescent', 'distributed': FailOnRank1}
MUTABLE = {'batch_size': 32}
METRICS = [(d5.TestAccuracy(), None)]
