"""The model, data and base optimizer of the distributed training checks (shared by the MPI
script and the single-rank reference in the test process)."""

import numpy as np

from deep500lite import networks
from deep500lite.datasets import dataset_loss, load_dataset
from deep500lite.frameworks import reference as d5ref

GLOBAL_BATCH = 24  # divisible by 2, 3 and 4
BUCKET_BYTES = 800  # the mlp's gradients (4096, 64, 640, 40 bytes) in 2 buckets: fc1.weight; the other three
MOMENTUM_KINDS = ("parameter_server", "decentralized_ring", "async_ps", "async_ps_serving", "async_ps_topk_all",
                  "ps_topk_all")
#: Kinds whose base is torch's native momentum optimizer on the torch executor (not a ThreeStepOptimizer).
TORCH_KINDS = ("decentralized_torch", "bucketed_topk_all_torch")


def base_kind(kind: str) -> str:
    """The base optimizer ("sgd", "momentum" or "torch_momentum") a distributed check kind uses."""
    if kind in TORCH_KINDS:
        return "torch_momentum"
    return "momentum" if kind in MOMENTUM_KINDS else "sgd"


def make_optimizer(kind: str, batch: int | None = None):
    """A fresh mlp (same seed, same weights): on the reference executor with a reference optimizer,
    (``torch_momentum``) on the torch executor with torch's own momentum optimizer, or
    (``torch_reference_momentum``) on the torch executor with the reference momentum optimizer."""
    net, _, out = networks.create_model("mlp", batch, classes=10, shape=(1, 8, 8), seed=3, hidden=(16,))
    net.add_operation(dataset_loss("digits")([out, "label"], "loss"))
    if kind == "torch_momentum":
        from deep500lite.frameworks import torch as d5torch

        return d5torch.MomentumOptimizer(d5torch.from_model(net), learning_rate=0.3, momentum=0.9)
    if kind == "torch_reference_momentum":
        from deep500lite.frameworks import torch as d5torch

        return d5ref.MomentumOptimizer(d5torch.from_model(net), learning_rate=0.3, momentum=0.9)
    ex = d5ref.from_model(net)
    if kind == "sgd":
        return d5ref.GradientDescent(ex, learning_rate=0.5)
    return d5ref.MomentumOptimizer(ex, learning_rate=0.3, momentum=0.9)


_train = None


def global_batch(k: int) -> dict:
    """The ``k``-th global batch of ``GLOBAL_BATCH`` digits (fixed, no shuffling)."""
    global _train
    if _train is None:
        _train, _ = load_dataset("digits", "input", "label")
    idx = np.arange(k * GLOBAL_BATCH, (k + 1) * GLOBAL_BATCH)
    return _train[idx]


def one_rank_parameters(kind: str, steps: int) -> dict[str, np.ndarray]:
    """One rank with the whole global batch: the parameters after ``steps`` of the base optimizer's own steps."""
    opt = make_optimizer(kind)
    for k in range(steps):
        opt.step(global_batch(k))
    names = [p for p, _ in opt.network.gradient(opt.loss)]
    return dict(zip(names, opt.network.fetch_tensors(names)))
