"""Deep500's samples/deepbench/{gemm,conv}_overhead_pytorch.py on deep500lite.

The samples time a GEMM and a convolution in plain PyTorch, then the same torch calls through
``d5pt.test_nativeop_forward`` with ``d5.L2Error``, ``d5.MaxError`` and
``d5.WallclockTime(RUNS * AVG_OVER, AVG_OVER)``. The problem list is the sample's own
``deepbench`` module (namedtuples ``GemmBench``/``ConvBench``); here it holds a few small
problems so that the port runs in seconds on a CPU. The Deep500 halves are as the samples write
them but for the imports and ``dev`` (the CPU instead of CUDA).
"""

from __future__ import annotations

import collections
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import deep500lite as d5  # noqa: E402
from deep500lite.frameworks import pytorch as d5pt  # noqa: E402

# The sample's deepbench module, with small problems.
GemmBench = collections.namedtuple("GemmBench", ["m", "n", "k", "a_trans", "b_trans"])
ConvBench = collections.namedtuple("ConvBench", ["w", "h", "c", "n", "k", "s", "r", "pad_w", "pad_h", "wstride",
                                                 "hstride"])
gemm_training_set = [GemmBench(64, 16, 48, False, False), GemmBench(32, 24, 40, True, False),
                     GemmBench(40, 8, 32, False, True)]
conv_training_set = [ConvBench(12, 10, 3, 2, 4, 3, 3, 1, 1, 1, 1), ConvBench(9, 9, 2, 2, 3, 3, 3, 0, 0, 2, 2)]

AVG_OVER = 10
RUNS = 5
dev = torch.device("cpu")


def _native_times(model, args):
    model(*args)  # warm-up, as the sample
    times = []
    for _ in range(RUNS):
        s = time.time()
        for _ in range(AVG_OVER):
            model(*args)
        times.append((time.time() - s) / AVG_OVER)
    return times


def test_gemm_overhead_pytorch_measures_and_matches_numpy():
    np.random.seed(0)
    for test in gemm_training_set:
        if test.a_trans:
            A = np.random.rand(test.k, test.m).astype(np.float32)
            Amult = A.transpose()
        else:
            A = np.random.rand(test.m, test.k).astype(np.float32)
            Amult = A
        var_A = torch.tensor(A, device=dev, dtype=torch.float32)
        if test.b_trans:
            B = np.random.rand(test.n, test.k).astype(np.float32)
            Bmult = B.transpose()
        else:
            B = np.random.rand(test.k, test.n).astype(np.float32)
            Bmult = B
        var_B = torch.tensor(B, device=dev, dtype=torch.float32)

        def model(A, B):
            Amul = A.transpose(0, 1) if test.a_trans else A
            Bmul = B.transpose(0, 1) if test.b_trans else B
            return torch.matmul(Amul, Bmul)

        l2err, maxerr, times = \
            d5pt.test_nativeop_forward(model, [var_A, var_B], [Amult @ Bmult],
                                       metrics=[d5.L2Error(), d5.MaxError(),
                                                d5.WallclockTime(RUNS * AVG_OVER, AVG_OVER)])
        reference = Amult.astype(np.float64) @ Bmult.astype(np.float64)
        assert maxerr < 1e-5 * np.abs(reference).max(), (test, maxerr)
        assert l2err < 1e-5 * np.linalg.norm(reference), (test, l2err)
        assert len(times) == RUNS and all(t > 0 for t in times), times
        native = _native_times(model, (var_A, var_B))
        # Deep500's overhead is one call per run on tensors already in place: same order as plain torch.
        assert np.median(times) < 50 * np.median(native) + 1e-3, (times, native)


def test_conv_overhead_pytorch_measures_a_real_convolution():
    np.random.seed(1)
    for test in conv_training_set:
        X = np.random.rand(test.n, test.c, test.h, test.w).astype(np.float32)
        W = np.random.rand(test.k, test.c, test.r, test.s).astype(np.float32)
        B = np.random.rand(test.k).astype(np.float32)
        var_X = torch.tensor(X, dtype=torch.float32, device=dev)
        var_W = torch.tensor(W, dtype=torch.float32, device=dev)
        var_B = torch.tensor(B, dtype=torch.float32, device=dev)
        model = torch.nn.Conv2d(test.c, test.k, (test.r, test.s), stride=(test.hstride, test.wstride),
                                padding=(test.pad_h, test.pad_w))
        model.weight = torch.nn.Parameter(var_W)
        model.bias = torch.nn.Parameter(var_B)

        times, = \
            d5pt.test_nativeop_forward(model, [var_X], [None],
                                       metrics=[d5.WallclockTime(RUNS * AVG_OVER, AVG_OVER)])
        assert len(times) == RUNS and all(t > 0 for t in times), times

        # The convolution that was timed is the real one: its output against a numpy convolution.
        out, = d5pt.test_nativeop_forward(model, [var_X], [_numpy_conv(X, W, B, test)], metrics=[d5.MaxError()])
        assert out < 1e-4 * test.c * test.r * test.s, (test, out)


def _numpy_conv(X, W, B, test):
    Xp = np.pad(X.astype(np.float64), ((0, 0), (0, 0), (test.pad_h, test.pad_h), (test.pad_w, test.pad_w)))
    oh = (Xp.shape[2] - test.r) // test.hstride + 1
    ow = (Xp.shape[3] - test.s) // test.wstride + 1
    out = np.zeros((X.shape[0], W.shape[0], oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = Xp[:, :, i * test.hstride:i * test.hstride + test.r, j * test.wstride:j * test.wstride + test.s]
            out[:, :, i, j] = np.einsum("ncrs,kcrs->nk", patch, W)
    return (out + B[None, :, None, None]).astype(np.float32)


def test_nativeop_gradient_checks_a_torch_op_and_catches_a_wrong_one():
    x = torch.tensor(np.random.default_rng(0).normal(size=(3, 4)), requires_grad=True)
    w = torch.tensor(np.random.default_rng(1).normal(size=(4, 2)), requires_grad=True)
    l2, maxerr = d5pt.test_nativeop_gradient(lambda a, b: torch.tanh(a @ b), [x, w],
                                             metrics=[d5.L2Error(), d5.MaxError()])
    assert maxerr < 1e-7 and l2 < 1e-7

    class WrongGrad(torch.autograd.Function):  # d/dx x**2 claimed to be x
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            a, = ctx.saved_tensors
            return g * a

    maxerr, = d5pt.test_nativeop_gradient(WrongGrad.apply, [x], metrics=[d5.MaxError()])
    assert maxerr > 0.1
