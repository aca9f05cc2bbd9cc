"""Data-parallel gradients in buckets whose allreduce starts during the backward pass.

The MPI tests run ``mpi_check_overlap.py`` once on 2 and once on 3 ranks (``mpirun`` from
tests/support.py): every configuration trains with ``overlap=True`` and ``overlap=False`` from the
same weights; the exchanged gradients and the trained parameters must agree, and equal one rank
with the whole batch (computed here with the base optimizer alone). The executor's gradient hook,
the bucket order and the bucket object are checked in this process.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from deep500lite.errors import UserError, UserTypeError
from deep500lite.lv3 import ConsistentDecentralized
from deep500lite.lv3.buckets import GradientBuckets, gradient_order
from support import mpirun, requires_mpi
from training_setup import global_batch, make_optimizer, one_rank_parameters

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 3
#: name -> (base optimizer kind, buckets expected): as CONFIGS in mpi_check_overlap.py.
CONFIGS = {"torch_each": ("torch_momentum", 4), "torch_800": ("torch_momentum", 2),
           "torch_default": ("torch_momentum", 1), "torch_gloo_800": ("torch_momentum", 2),
           "torch_reference_800": ("torch_reference_momentum", 2), "reference_800": ("momentum", 2)}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """``jobs(p)[name]``: every rank's saved arrays (each job runs once per test session)."""
    cache = {}

    def get(p):
        if p not in cache:
            out = tmp_path_factory.mktemp(f"overlap{p}")
            rc, text, _ = mpirun(p, os.path.join(HERE, "mpi_check_overlap.py"), str(out), timeout=240)
            assert rc == 0, text[-5000:]
            cache[p] = {name: [dict(np.load(out / f"{name}-rank{r}.npz")) for r in range(p)] for name in CONFIGS}
        return cache[p]
    return get


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("p", [2, 3])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_overlapped_buckets_give_the_gradients_and_parameters_of_the_exchange_after_backward(jobs, p, name):
    ranks = jobs(p)[name]
    kind, _ = CONFIGS[name]
    keys = [k[3:] for k in ranks[0] if k.startswith("on:param:") or k.startswith("on:grad")]
    assert len([k for k in keys if k.startswith("grad")]) == STEPS * 4, keys
    for r, got in enumerate(ranks):
        for key in keys:
            on, off = got[f"on:{key}"], got[f"off:{key}"]
            # Both paths allreduce buckets of the same bytes with the same MPI operation: equal bit for bit.
            np.testing.assert_array_equal(on, off, err_msg=f"rank {r} {key}")
            np.testing.assert_array_equal(on, ranks[0][f"on:{key}"], err_msg=f"rank {r} differs from rank 0: {key}")
        np.testing.assert_array_equal(got["on:bytes"], got["off:bytes"])
    expected = one_rank_parameters(kind, STEPS)
    start = make_optimizer(kind)
    for pname, value in expected.items():
        assert not np.allclose(start.network.fetch_tensor(pname), value), f"{pname} did not move"
        np.testing.assert_allclose(ranks[0][f"on:param:{pname}"], value, rtol=1e-4, atol=2e-6, err_msg=pname)


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize("p", [2, 3])
def test_buckets_start_during_the_backward_pass_where_the_executor_shows_gradients(jobs, p):
    for name, (kind, buckets) in CONFIGS.items():
        for r, got in enumerate(jobs(p)[name]):
            assert int(got["on:buckets"]) == buckets, (name, r)
            # The torch executor reports each gradient as autograd finishes it, so every bucket starts
            # inside the backward pass; the reference executor reports nothing: all start after it.
            during = buckets if kind.startswith("torch") else 0
            assert got["on:overlapped"].tolist() == [during] * STEPS, (name, r, got["on:overlapped"])
            assert got["off:overlapped"].tolist() == [0] * STEPS


# ------------------------------------------------------------------------------ in this process
class Recorder:
    """A gradient hook that keeps what it sees and can overwrite or fail."""

    def __init__(self, scale=None, fail_on=None):
        self.seen, self.ends, self.scale, self.fail_on = [], 0, scale, fail_on

    def on_gradient(self, name, grad):
        if name == self.fail_on:
            raise RuntimeError(f"hook failed on {name}")
        self.seen.append((name, np.array(grad)))
        if self.scale is not None:
            grad *= self.scale

    def on_backward_end(self):
        self.ends += 1


def _torch_setup():
    opt = make_optimizer("torch_reference_momentum")
    ex = opt.executor
    names = [p for p, _ in ex.network.gradient("loss")]
    return ex, names, global_batch(0)


def test_torch_executor_reports_each_gradient_during_backward_last_layer_first():
    ex, names, batch = _torch_setup()
    ex.inference_and_backprop(batch, "loss")
    plain = {n: ex.fetch_tensor(f"{n}_grad") for n in names}
    hook = Recorder()
    assert ex.set_gradient_hook(hook) is True
    ex.inference_and_backprop(batch, "loss")
    assert sorted(n for n, _ in hook.seen) == sorted(names) and hook.ends == 1
    for n, g in hook.seen:
        np.testing.assert_array_equal(g, plain[n], err_msg=n)
    order = [n for n, _ in hook.seen]
    assert order.index("fc2.weight") < order.index("fc1.weight"), order  # the last layer's gradient comes first
    ex.set_gradient_hook(None)
    ex.inference_and_backprop(batch, "loss")
    assert len(hook.seen) == len(names) and hook.ends == 1  # removed: no more calls


def test_what_the_hook_writes_is_the_gradient():
    ex, names, batch = _torch_setup()
    ex.inference_and_backprop(batch, "loss")
    plain = {n: ex.fetch_tensor(f"{n}_grad") for n in names}
    ex.set_gradient_hook(Recorder(scale=0.5))
    ex.inference_and_backprop(batch, "loss")
    for n in names:
        np.testing.assert_allclose(ex.fetch_tensor(f"{n}_grad"), plain[n] * 0.5, rtol=1e-6, err_msg=n)


def test_a_failing_hook_raises_after_backward_and_the_next_call_works():
    ex, names, batch = _torch_setup()
    hook = Recorder(fail_on="fc1.bias")
    ex.set_gradient_hook(hook)
    with pytest.raises(RuntimeError, match="hook failed on fc1.bias"):
        ex.inference_and_backprop(batch, "loss")
    assert hook.ends == 0
    hook.fail_on = None
    hook.seen = []
    ex.inference_and_backprop(batch, "loss")
    assert len(hook.seen) == len(names) and hook.ends == 1


def test_executors_without_gradient_hooks_say_so():
    opt = make_optimizer("momentum")  # the reference executor
    assert opt.executor.set_gradient_hook(Recorder()) is False


def test_gradient_order_puts_parameters_read_later_first():
    """On the zoo's LeNet (an ONNX graph nobody here hand-wrote for this): conv1 first in the forward pass, last here."""
    from deep500lite.networks import create_model

    net = create_model("lenet", 4, classes=10, shape=(1, 28, 28))[0]
    names = list(net.parameters)
    ordered = gradient_order(net, names)
    assert sorted(ordered) == sorted(names)
    first_use = {}
    for k, node in enumerate(net.graph.node):
        for name in node.input:
            first_use.setdefault(name, k)
    uses = [first_use[n] for n in ordered]
    assert uses == sorted(uses, reverse=True), list(zip(ordered, uses))
    for a, b in zip(ordered, ordered[1:]):  # a node's bias before its weight, as DDP's reversed parameters()
        if first_use[a] == first_use[b]:
            assert names.index(a) > names.index(b), (a, b)


def test_bucket_layout_and_bad_arguments():
    from deep500lite.lv3 import TorchDistributedCommunicator

    comm = TorchDistributedCommunicator()  # one process: size 1, no process group
    opt = ConsistentDecentralized(make_optimizer("torch_momentum"), comm, bucket_bytes=800)
    opt.step(global_batch(0))
    assert opt.bucket_layout == [["fc2.bias", "fc2.weight", "fc1.bias"], ["fc1.weight"]]
    assert opt.overlapped_buckets == 2
    buckets = GradientBuckets(comm, 0)
    buckets.prepare(opt.network, "loss")
    with pytest.raises(UserError, match="Received"):
        buckets.average(["fc1.weight"], [np.zeros((64, 16), np.float32)])
    with pytest.raises(UserTypeError, match="overlap must be True or False"):
        ConsistentDecentralized(make_optimizer("sgd"), comm, overlap="yes")
