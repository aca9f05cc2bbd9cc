"""Deep500's samples/deepbench/{gemm,conv}_overhead_tensorflow.py on deep500lite.

The samples switch TensorFlow to graph mode (``tf.disable_v2_behavior()``), time ``tf.matmul``
(or ``tf.layers.conv2d``) with ``sess.run``, then the same graphs through
``d5tf.test_nativeop_forward`` with ``d5.L2Error``, ``d5.MaxError`` and
``d5.WallclockTime(RUNS * AVG_OVER, AVG_OVER)``. Graph mode is process-wide, so each port runs
as a script in a fresh interpreter; its ``deepbench`` module holds a few small problems. The
scripts are the samples' Deep500 halves with the imports changed; they print their measurements
as JSON for the assertions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("tensorflow")

DEEPBENCH = """
from collections import namedtuple
GemmBench = namedtuple('GemmBench', ['m', 'n', 'k', 'a_trans', 'b_trans'])
ConvBench = namedtuple('ConvBench', ['w', 'h', 'c', 'n', 'k', 's', 'r', 'pad_w', 'pad_h', 'wstride', 'hstride'])
gemm_training_set = [GemmBench(48, 16, 32, False, False), GemmBench(24, 20, 36, True, False),
                     GemmBench(30, 12, 16, False, True)]
conv_training_set = [ConvBench(10, 8, 3, 2, 4, 3, 3, 0, 0, 1, 1)]
"""

GEMM = """
import json
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
import deepbench

AVG_OVER = 10
RUNS = 5

import numpy as np
import deep500lite as d5
from deep500lite.frameworks import tensorflow as d5tf

found = []
for test in deepbench.gemm_training_set:
    if test.a_trans:
        A = np.random.rand(test.k, test.m).astype(np.float32)
        var_A = tf.Variable(A, name="var_A", dtype=tf.float32)
        Amult = A.transpose()
    else:
        A = np.random.rand(test.m, test.k).astype(np.float32)
        var_A = tf.Variable(A, name="var_A", dtype=tf.float32)
        Amult = A
    if test.b_trans:
        B = np.random.rand(test.n, test.k).astype(np.float32)
        var_B = tf.Variable(B, name="var_B", dtype=tf.float32)
        Bmult = B.transpose()
    else:
        B = np.random.rand(test.k, test.n).astype(np.float32)
        var_B = tf.Variable(B, name="var_B", dtype=tf.float32)
        Bmult = B

    mm = lambda a, b: tf.matmul(a, b, test.a_trans, test.b_trans)

    l2err, maxerr, times = \\
        d5tf.test_nativeop_forward(mm, [var_A, var_B], [Amult @ Bmult],
                                   metrics=[d5.L2Error(), d5.MaxError(),
                                            d5.WallclockTime(RUNS*AVG_OVER, AVG_OVER)])
    tf.reset_default_graph()
    ref = Amult.astype(np.float64) @ Bmult.astype(np.float64)
    found.append(dict(l2=float(l2err), max=float(maxerr), times=[float(t) for t in times],
                      refmax=float(np.abs(ref).max()), refnorm=float(np.linalg.norm(ref))))
print("RESULT " + json.dumps(found))
"""

CONV = """
import json
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
import deepbench

AVG_OVER = 10
RUNS = 5

import numpy as np
import deep500lite as d5
from deep500lite.frameworks import tensorflow as d5tf

found = []
for test in deepbench.conv_training_set:
    X = np.random.rand(test.n, test.c, test.h, test.w).astype(np.float32)
    W = np.random.rand(test.k, test.c, test.r, test.s).astype(np.float32)
    var_X = tf.Variable(X, name="var_X", dtype=tf.float32)
    cnv2d = lambda x: tf.layers.conv2d(x, filters=test.k, kernel_size=[test.r, test.s],
                                       strides=[test.hstride, test.wstride], data_format='channels_first',
                                       kernel_initializer=tf.constant_initializer(W))
    times, = \\
        d5tf.test_nativeop_forward(cnv2d, [var_X], [None],
                                   metrics=[d5.WallclockTime(RUNS*AVG_OVER, AVG_OVER)])
    tf.reset_default_graph()
    found.append(dict(times=[float(t) for t in times]))
print("RESULT " + json.dumps(found))
"""


def _run(tmp_path, script):
    (tmp_path / "deepbench.py").write_text(textwrap.dedent(DEEPBENCH))
    (tmp_path / "sample.py").write_text(textwrap.dedent(script))
    proc = subprocess.run([sys.executable, "sample.py"], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    if proc.returncode != 0 and "not available with Keras 3" in proc.stderr:
        pytest.skip("tf.layers.conv2d needs Keras 2 (tf_keras + TF_USE_LEGACY_KERAS=1); this TensorFlow has Keras 3")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), proc.stdout


def test_gemm_overhead_tensorflow_graph_mode(tmp_path):
    found, out = _run(tmp_path, GEMM)
    assert len(found) == 3
    for r in found:
        assert r["max"] < 1e-5 * r["refmax"] and r["l2"] < 1e-5 * r["refnorm"], r
        assert len(r["times"]) == 5 and all(t > 0 for t in r["times"]), r
    assert "WallclockTime on native inference for output 0" in out


def _v1_layers_available() -> bool:
    import importlib.util
    import os

    import keras

    if int(keras.__version__.split(".")[0]) < 3:
        return True
    return importlib.util.find_spec("tf_keras") is not None and os.environ.get("TF_USE_LEGACY_KERAS") == "1"


def test_conv_overhead_tensorflow_graph_mode(tmp_path):
    if not _v1_layers_available():
        pytest.skip("tf.layers.conv2d needs Keras 2 (tf_keras + TF_USE_LEGACY_KERAS=1); this TensorFlow has Keras 3")
    found, _ = _run(tmp_path, CONV)
    assert all(len(r["times"]) == 5 and all(t > 0 for t in r["times"]) for r in found)


def test_nativeop_eager_mode_and_gradient():
    import tensorflow as tf

    import deep500lite as d5
    from deep500lite.frameworks import tensorflow as d5tf

    a = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    b = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    l2, times = d5tf.test_nativeop_forward(lambda x, y: tf.matmul(x, y), [tf.Variable(a), tf.Variable(b)], [a @ b],
                                           metrics=[d5.L2Error(), d5.WallclockTime(20, 5)])
    assert l2 < 1e-5 and len(times) == 4 and all(t > 0 for t in times)
    x = tf.constant(np.random.default_rng(2).normal(size=(3, 4)))
    maxerr, = d5tf.test_nativeop_gradient(lambda t: tf.tanh(t) * t, [x], metrics=[d5.MaxError()])
    assert maxerr < 1e-7
    wrong = tf.custom_gradient(lambda t: (t * t, lambda dy: dy * t))  # claims d(t^2)/dt = t
    maxerr, = d5tf.test_nativeop_gradient(wrong, [x], metrics=[d5.MaxError()])
    assert maxerr > 0.1
