"""Run by ``horovodrun -np 2 --gloo``: the digits mlp trained with HorovodDistributedOptimizer.

Argument: ``torch`` or ``tensorflow``. Rank 1 starts from other weights (the adapter's first
step must give it rank 0's); each rank takes its half of every global batch. Each rank prints
``RESULT <rank> <json of its parameters>``.
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import training_setup as ts  # noqa: E402

from deep500lite import networks  # noqa: E402
from deep500lite.datasets import dataset_loss  # noqa: E402
from deep500lite.registry import import_framework  # noqa: E402

STEPS = 5
PARAMS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def base_optimizer(framework):
    """The same mlp as the MPI checks, with ``framework``'s native momentum optimizer."""
    net, _, out = networks.create_model("mlp", None, classes=10, shape=(1, 8, 8), seed=3, hidden=(16,))
    net.add_operation(dataset_loss("digits")([out, "label"], "loss"))
    fw = import_framework(framework)
    return fw.MomentumOptimizer(fw.from_model(net), learning_rate=0.3, momentum=0.9)


def main(framework):
    fw = import_framework(framework)
    hvd = __import__(f"horovod.{framework}", fromlist=["init"])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    base = base_optimizer(framework)
    if rank != 0:
        base.network.feed_tensor("fc1.weight", base.network.fetch_tensor("fc1.weight") + np.float32(0.25))
    opt = fw.HorovodDistributedOptimizer(base)
    per = ts.GLOBAL_BATCH // size
    for k in range(STEPS):
        batch = ts.global_batch(k)
        opt.step({key: v[rank * per:(rank + 1) * per] for key, v in batch.items()})
    params = {n: opt.network.fetch_tensor(n).tolist() for n in PARAMS}
    print("RESULT", rank, json.dumps(params), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
