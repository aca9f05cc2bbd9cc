"""Deep500's ``samples/deepbench/{gemm,conv}_overhead_tensorflow.py``: TensorFlow 1 graphs against ``test_nativeop_forward``.

The samples run in TensorFlow's graph mode (``tensorflow.compat.v1``, ``disable_v2_behavior``),
which is process-wide, so each check here runs a script of our own in a fresh interpreter. Their
path: ``tf.Variable`` inputs, a function of them (``tf.matmul`` with transpose flags;
``tf.layers.conv2d`` with ``data_format='channels_first'``, Keras 2 through ``tf_keras`` and
``TF_USE_LEGACY_KERAS=1``), a plain half timed with ``session.run`` and ``d5tf.test_nativeop_forward(fn,
[variables], [reference or None], metrics=[..., d5.WallclockTime(runs * avg_over, avg_over)])``.

TensorFlow's own CPU ``Conv2D`` takes channels-first input only through oneDNN. The convolution
check runs with TensorFlow's default and with ``TF_ENABLE_ONEDNN_OPTS=0``; when TensorFlow
refuses, the check asserts that it is that refusal (``UnimplementedError`` saying the CPU
supports NHWC only) in both halves, and that the same convolution channels-last passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("tensorflow")

PRODUCTS = """
import json, time
import numpy as np
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
import deep500lite as d5
from deep500lite.frameworks import tensorflow as d5tf

report = []
for rows, inner, cols, ta, tb in [(40, 24, 16, False, False), (20, 36, 12, True, False), (28, 18, 22, False, True)]:
    rng = np.random.default_rng(rows)
    a = rng.random((inner, rows) if ta else (rows, inner)).astype(np.float32)
    b = rng.random((cols, inner) if tb else (inner, cols)).astype(np.float32)
    want = (a.T if ta else a) @ (b.T if tb else b)
    with tf.Session() as session:
        va, vb = tf.Variable(a), tf.Variable(b)
        product = tf.matmul(va, vb, ta, tb)
        session.run(tf.global_variables_initializer())
        start = time.perf_counter(); [session.run(product) for _ in range(12)]
        plain = (time.perf_counter() - start) / 12
    fn = lambda x, y: tf.matmul(x, y, ta, tb)
    l2, worst, averages = d5tf.test_nativeop_forward(fn, [tf.Variable(a), tf.Variable(b)], [want],
        metrics=[d5.L2Error(), d5.MaxError(), d5.WallclockTime(12, 4)])
    tf.reset_default_graph()
    report.append(dict(l2=float(l2), worst=float(worst), averages=[float(t) for t in averages], plain=plain,
                       scale=float(np.abs(want).max())))
print("JSON " + json.dumps(report))
"""

CONVOLUTION = """
import json, time
import numpy as np
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
import deep500lite as d5
from deep500lite.frameworks import tensorflow as d5tf

x = np.random.default_rng(0).random((2, 3, 9, 9)).astype(np.float32)
kernel = np.random.default_rng(1).random((3, 3, 3, 4)).astype(np.float32)   # HWIO
outcome = {}
for layout in ("channels_first", "channels_last"):
    feed = x if layout == "channels_first" else x.transpose(0, 2, 3, 1)
    layer = lambda v: tf.layers.conv2d(v, filters=4, kernel_size=[3, 3], data_format=layout, use_bias=False,
                                       kernel_initializer=tf.constant_initializer(kernel))
    try:
        with tf.Session() as session:
            y = layer(tf.Variable(feed))
            session.run(tf.global_variables_initializer())
            value = session.run(y)
        plain = {"ok": True, "value": (value if layout == "channels_first" else value.transpose(0, 3, 1, 2)).tolist()}
    except Exception as err:
        plain = {"ok": False, "error": type(err).__name__ + ": " + str(err)}
    tf.reset_default_graph()
    try:
        (averages,) = d5tf.test_nativeop_forward(layer, [tf.Variable(feed)], [None], metrics=[d5.WallclockTime(6, 3)])
        native = {"ok": True, "averages": [float(t) for t in averages]}
    except Exception as err:
        native = {"ok": False, "error": type(err).__name__ + ": " + str(err)}
    tf.reset_default_graph()
    outcome[layout] = {"plain": plain, "native": native}
print("JSON " + json.dumps({"x": x.tolist(), "kernel": kernel.tolist(), "outcome": outcome}))
"""

NCHW_REFUSAL = "The Conv2D op currently only supports the NHWC tensor format on the CPU"


def _run(tmp_path, script, **env):
    path = tmp_path / "bench.py"
    path.write_text(textwrap.dedent(script))
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("JSON "))[5:])


def test_products_in_both_halves(tmp_path):
    for r in _run(tmp_path, PRODUCTS):
        assert r["worst"] <= 1e-5 * r["scale"] and r["l2"] <= 1e-5 * r["scale"] * 30, r
        assert len(r["averages"]) == 3 and min(r["averages"]) > 0 and r["plain"] > 0, r


@pytest.mark.requires("tf_keras")
@pytest.mark.parametrize("onednn", [None, "0"], ids=["tensorflow-default", "onednn-off"])
def test_a_channels_first_convolution_or_tensorflows_own_refusal(tmp_path, onednn):
    env = {"TF_USE_LEGACY_KERAS": "1"} | ({} if onednn is None else {"TF_ENABLE_ONEDNN_OPTS": onednn})
    found = _run(tmp_path, CONVOLUTION, **env)
    x, kernel = np.array(found["x"]), np.array(found["kernel"])
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))   # n, c, i, j, r, s
    want = np.einsum("ncijrs,rsco->noij", windows, kernel)
    last = found["outcome"]["channels_last"]
    assert last["plain"]["ok"] and last["native"]["ok"], last  # what TensorFlow always runs on a CPU
    np.testing.assert_allclose(np.array(last["plain"]["value"]), want, rtol=1e-4)
    first = found["outcome"]["channels_first"]
    if first["plain"]["ok"]:  # oneDNN did it
        np.testing.assert_allclose(np.array(first["plain"]["value"]), want, rtol=1e-4)
        assert first["native"]["ok"] and len(first["native"]["averages"]) == 2
    else:  # TensorFlow's CPU kernel without oneDNN: its own refusal, in both halves
        assert first["plain"]["error"].startswith("UnimplementedError") and NCHW_REFUSAL in first["plain"]["error"]
        assert not first["native"]["ok"] and NCHW_REFUSAL in first["native"]["error"], first
    if onednn == "0":
        assert not first["plain"]["ok"]  # TensorFlow 2.21 on a CPU: no NCHW Conv2D without oneDNN
