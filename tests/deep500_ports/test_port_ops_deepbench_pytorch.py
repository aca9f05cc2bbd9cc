"""Deep500's ``samples/deepbench/{gemm,conv}_overhead_pytorch.py``: plain PyTorch against ``test_nativeop_forward``.

The samples time a product and a convolution in plain PyTorch, then the same torch callables
through ``d5pt.test_nativeop_forward(fn, [tensors], [reference or None], metrics=[d5.L2Error(),
d5.MaxError(), d5.WallclockTime(runs * avg_over, avg_over)])``, which returns one value per
metric (the timer's: one average per ``avg_over`` runs). Their plain half names CUDA; the
porting guide's rule makes it fall back to the CPU on a machine without a GPU, and both halves
then time the same CPU work. The problems here are small ones of our own.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import deep500lite as d5  # noqa: E402
from deep500lite.frameworks import pytorch as d5pt  # noqa: E402

GROUPS, PER_GROUP = 4, 8
# the guide's rule for plain PyTorch lines that name CUDA
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _plain_times(fn, *args):
    fn(*args)
    averages = []
    for _ in range(GROUPS):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(PER_GROUP):
            fn(*args)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        averages.append((time.perf_counter() - t0) / PER_GROUP)
    return averages


@pytest.mark.parametrize("rows,inner,cols,left_t,right_t", [(48, 40, 24, False, False), (36, 20, 28, True, False),
                                                             (30, 52, 16, False, True)])
def test_products_in_both_halves(rows, inner, cols, left_t, right_t):
    rng = np.random.default_rng(rows)
    a = rng.random((inner, rows) if left_t else (rows, inner), dtype=np.float32)
    b = rng.random((cols, inner) if right_t else (inner, cols), dtype=np.float32)

    def product(x, y):
        return (x.t() if left_t else x) @ (y.t() if right_t else y)

    want = (a.T if left_t else a).astype(np.float64) @ (b.T if right_t else b).astype(np.float64)
    xa, xb = torch.tensor(a, device=dev), torch.tensor(b, device=dev)
    plain = _plain_times(product, xa, xb)
    l2, worst, averages = d5pt.test_nativeop_forward(
        product, [xa, xb], [want.astype(np.float32)],
        metrics=[d5.L2Error(), d5.MaxError(), d5.WallclockTime(GROUPS * PER_GROUP, PER_GROUP)])
    assert worst < 1e-5 * np.abs(want).max() and l2 < 1e-5 * np.linalg.norm(want)
    assert len(averages) == GROUPS == len(plain) and min(averages) > 0 and min(plain) > 0


def _correlate(x, w, bias, stride, pad):
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    span = (xp.shape[2] - k) // stride + 1
    windows = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncijrs,ocrs->noij", windows[:, :, :span, :span], w) + bias[None, :, None, None]


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 0)])
def test_a_convolution_in_both_halves(stride, pad):
    rng = np.random.default_rng(stride)
    x = rng.random((2, 3, 11, 11), dtype=np.float32)
    w = rng.random((5, 3, 3, 3), dtype=np.float32)
    bias = rng.random(5, dtype=np.float32)
    layer = torch.nn.Conv2d(3, 5, 3, stride=stride, padding=pad).to(dev)
    layer.weight = torch.nn.Parameter(torch.tensor(w, device=dev))
    layer.bias = torch.nn.Parameter(torch.tensor(bias, device=dev))
    image = torch.tensor(x, device=dev)
    plain = _plain_times(layer, image)
    (averages,) = d5pt.test_nativeop_forward(layer, [image], [None],
                                             metrics=[d5.WallclockTime(GROUPS * PER_GROUP, PER_GROUP)])
    assert len(averages) == GROUPS and min(averages) > 0 and min(plain) > 0
    (worst,) = d5pt.test_nativeop_forward(layer, [image], [_correlate(x, w, bias, stride, pad).astype(np.float32)],
                                          metrics=[d5.MaxError()])
    assert worst < 1e-4


def test_native_gradient_check_catches_a_wrong_backward():
    x = torch.tensor(np.random.default_rng(3).normal(size=(4, 3)), requires_grad=True)
    (worst,) = d5pt.test_nativeop_gradient(lambda t: torch.sin(t) * t, [x], metrics=[d5.MaxError()])
    assert worst < 1e-7

    class Halved(torch.autograd.Function):  # claims d(t^3)/dt = 1.5 t^2
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t ** 3

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return g * 1.5 * t ** 2

    (worst,) = d5pt.test_nativeop_gradient(Halved.apply, [x], metrics=[d5.MaxError()])
    assert worst > 0.1
