"""Deep500's ``samples/onnxtest.py``: one of ONNX's own backend tests, run on the TensorFlow executor.

The sample's path: ``d5.OnnxTestParser()`` over the installed onnx package's tests,
``all_tests['Node']`` (names to draw from), ``get_test(name)`` (``None`` for an unknown one),
``load_and_parse_model(test.model)``, and ``d5.test_executor_inference(executor,
inputs=test.data_sets[0].inputs, reference_outputs=test.data_sets[0].outputs,
metrics=[d5.L2Error()])``, which prints one L2 error per output. The outputs must be ONNX's
expected ones within ONNX's node-test tolerances.
"""

import random

import numpy as np
import pytest

import deep500lite as d5

pytest.importorskip("tensorflow")
from deep500lite.frameworks import tensorflow as d5tf  # noqa: E402

# node tests across the operator families TensorFlow's executor converts
CASES = ["test_sigmoid", "test_mul_bcast", "test_matmul_4d", "test_gemm_transposeB",
         "test_conv_with_autopad_same", "test_maxpool_2d_strides", "test_averagepool_2d_pads",
         "test_batchnorm_example", "test_softmax_large_number", "test_reduce_sum_keepdims_random",
         "test_transpose_default", "test_concat_3d_axis_1", "test_gather_0", "test_slice_default_axes",
         "test_reshape_negative_dim", "test_exp", "test_cast_DOUBLE_to_FLOAT", "test_clip_default_min",
         "test_argmin_default_axis_example", "test_gru_defaults"]


def _run(test):
    ex = d5tf.from_model(d5.parser.load_and_parse_model(test.model))
    first = test.data_sets[0]
    return d5.test_executor_inference(ex, inputs=first.inputs, reference_outputs=first.outputs,
                                      metrics=[d5.L2Error()])


@pytest.mark.parametrize("name", CASES)
def test_node_test_matches_onnx(name, capsys):
    test = d5.OnnxTestParser().get_test(name)
    results = _run(test)
    expected = test.data_sets[0].outputs
    assert capsys.readouterr().out.count("L2Error on inference for output") == len(expected)
    for (key, want), l2 in zip(expected.items(), results):
        np.testing.assert_allclose(results.outputs[key], want, rtol=1e-3, atol=1e-6, err_msg=f"{name}: {key}")
        finite = np.isfinite(np.asarray(want, np.float64)).all()  # a NaN or inf output makes the L2 error NaN
        assert not finite or l2 <= 1e-3 * (1 + np.linalg.norm(np.asarray(want, np.float64))), (name, key, l2)


def test_a_drawn_test_and_an_unknown_name():
    parser = d5.OnnxTestParser()
    names = parser.all_tests["Node"]
    assert len(names) > 1000 and "test_relu" in names
    assert parser.get_test("test_nothing_by_this_name") is None
    draw = random.Random(5)
    picked = next(n for n in iter(lambda: draw.choice(names), None)
                  if n.startswith("test_add") or n.startswith("test_sub"))
    results = _run(parser.get_test(picked))
    assert len(results) == len(parser.get_test(picked).data_sets[0].outputs)
