"""Deep500's TensorFlow 1 samples ``tf_native_operator.py`` and ``tf_native_training.py``.

Both need TensorFlow's graph mode (``import tensorflow.compat.v1 as tf``,
``tf.disable_v2_behavior()``), which is process-wide, so each check runs a script of our own in a
fresh interpreter and reads back what it prints as JSON.

- The operator sample's path: ``d5tf.custom_op_from_native(tf_function, [descriptors], [descriptors])``
  with descriptors from the reference framework's ``desc_from_tensor(numpy array)``, then
  ``d5.test_op_forward``, ``d5tf.test_nativeop_forward``, ``d5.test_op_gradient(op, inputs, eps=)``
  and ``d5tf.test_nativeop_gradient(fn, variables, eps=)`` inside a ``tf.Session``.
- The training sample's path: a graph of placeholders and variables, Deep500's
  ``d5tf.TensorflowNativeGraphExecutor(loss_tensor, output.name)``, ``executor.inference({placeholder:
  value})`` keyed by placeholders, and the native ``d5tf.GradientDescent(executor, loss.name, lr)``
  with the learning rate itself a placeholder fed at each ``step``.
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

OPERATOR = """
import json
import numpy as np
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
import deep500lite as d5
from deep500lite.frameworks import reference as d5ref, tensorflow as d5tf

left = np.random.default_rng(1).random((3, 7))
right = np.random.default_rng(2).random((7, 4))
def outer_sum(a, b):
    return tf.tanh(tf.matmul(a, b))

with tf.Session() as session:
    op = d5tf.custom_op_from_native(outer_sum, [d5ref.desc_from_tensor(left), d5ref.desc_from_tensor(right)],
                                    [d5ref.desc_from_tensor(np.tanh(left @ right))])
    forward = d5.test_op_forward(op, [left, right], [np.tanh(left @ right)], verbose=False)
    native = d5tf.test_nativeop_forward(outer_sum, [tf.Variable(left), tf.Variable(right)], [np.tanh(left @ right)],
                                        metrics=[d5.MaxError()])
    gradient = d5.test_op_gradient(op, [left, right], eps=1e-7, verbose=False)
    native_grad = d5tf.test_nativeop_gradient(outer_sum, [tf.Variable(left), tf.Variable(right)], eps=1e-7,
                                              metrics=[d5.MaxError()])
print("JSON", json.dumps({"descs": [str(d) for d in op.input_descriptors + op.output_descriptors],
                          "forward": bool(forward.passed), "native_max": float(np.max(native)),
                          "gradient": bool(gradient.passed), "native_grad_max": float(np.max(native_grad))}))
"""

TRAINING = """
import json
import numpy as np
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
from deep500lite.frameworks import tensorflow as d5tf

t = tf.placeholder(tf.float32)
target = tf.placeholder(tf.float32)
rate = tf.placeholder(tf.float32)
slope, shift = tf.Variable(-1.0), tf.Variable(4.0)
guess = slope * t + shift
error = tf.squared_difference(guess, target)
ex = d5tf.TensorflowNativeGraphExecutor(error, guess.name)
first = ex.inference({t: 2.0, target: 5.0})
sgd = d5tf.GradientDescent(ex, error.name, rate)
rng = np.random.default_rng(0)
for _ in range(600):
    x = float(rng.random() * 2)
    sgd.step({t: x, target: 3 * x - 1, rate: 0.05})
last = ex.inference({t.name: 2.0, target: 5.0})
ex.inference_and_backprop({t: 1.0, target: 0.0})
print("JSON", json.dumps({"first": {k: float(v) for k, v in first.items()},
                          "last": {k: float(v) for k, v in last.items()},
                          "names": [guess.name, error.name], "params": ex.network.parameters,
                          "grads": [float(g) for g in ex.network.fetch_tensors([p + "_grad" for p in ex.network.parameters])],
                          "values": [float(v) for v in ex.network.fetch_tensors(ex.network.parameters)]}))
"""


def _run(tmp_path, script):
    path = tmp_path / "sample.py"
    path.write_text(textwrap.dedent(script))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("JSON "))
    return json.loads(line[5:])


def test_a_native_function_as_an_operator_passes_both_checks(tmp_path):
    found = _run(tmp_path, OPERATOR)
    assert found["descs"] == ["float64[3x7]", "float64[7x4]", "float64[3x4]"]
    assert found["forward"] and found["gradient"]
    assert found["native_max"] < 1e-12 and found["native_grad_max"] < 1e-5


def test_a_tensorflow_1_graph_trains_with_a_placeholder_learning_rate(tmp_path):
    found = _run(tmp_path, TRAINING)
    out, loss = found["names"]
    assert found["first"] == {out: 2.0, loss: 9.0}  # -1 * 2 + 4 = 2, (2 - 5)^2 = 9
    assert abs(found["last"][out] - 5.0) < 0.02 and found["last"][loss] < 1e-3  # 3 * 2 - 1
    slope, shift = found["values"]
    assert abs(slope - 3.0) < 0.02 and abs(shift + 1.0) < 0.02
    # d/dw (w x + b - y)^2 at x = 1, y = 0 is 2 (w + b); d/db the same
    np.testing.assert_allclose(found["grads"], [2 * (slope + shift)] * 2, rtol=1e-5)
    assert len(found["params"]) == 2


def test_graph_executor_refuses_eager_mode():
    from deep500lite.errors import UserError
    from deep500lite.frameworks import tensorflow as d5tf

    import tensorflow as tf

    with pytest.raises(UserError, match=r"tf.disable_v2_behavior\(\)"):
        d5tf.TensorflowNativeGraphExecutor(tf.constant(1.0), "output")
