"""ONNX backend node tests on the TensorFlow executor.

Node tests on types TensorFlow has no dtype for (float8, float4, int4, int2, e8m0) and on
sequence or optional values are not declared: the executor refuses them up front with
UnsupportedOperatorError, so they are not run here.
"""

import pytest

pytest.importorskip("tensorflow", reason="needs tensorflow: pip install 'deep500lite[tensorflow]'")

from conformance import MachineDependent, node_test_cases  # noqa: E402

# test name -> why it fails on this executor
EXPECTED_FAILURES: dict[str, str] = {
    **{name: "Dropout in training mode draws random numbers; ONNX's expected values come from numpy's generator"
       for name in ["test_training_dropout", "test_training_dropout_default", "test_training_dropout_default_mask",
                    "test_training_dropout_mask"]},
    **{name: "Resize with antialias=1 is refused (UnsupportedOperatorError): the converter has no antialiasing "
             "filter" for name in ["test_resize_downsample_scales_cubic_antialias",
                                   "test_resize_downsample_scales_linear_antialias",
                                   "test_resize_downsample_sizes_cubic_antialias",
                                   "test_resize_downsample_sizes_linear_antialias"]},
    # Passes on some CPUs (this machine's among them) and fails on others, so not strict.
    **{name: MachineDependent("float16 rounding: TensorFlow's half-precision softmax and matmul round once where "
                              "the step-by-step ONNX expansion rounds per op (1-2 ulp off, above the test's "
                              "rtol=1e-3) on some CPUs")
       for name in ["test_attention_4d_causal_fp16_expanded",
                    "test_attention_4d_gqa_with_past_and_present_fp16_expanded"]},
    "test_causal_conv_with_state_silu_fp16_expanded": MachineDependent(
        "float16 rounding: on an AMD EPYC (AVX-512 with FP16/BF16) TensorFlow's half-precision convolution rounds "
        "3 of 64 outputs 1 ulp away from the ONNX expansion's (relative 1.2e-3, above the test's rtol=1e-3); it "
        "passes on an Intel Xeon"),
    **{name: "ONNX's expanded 2-D AffineGrid squeezes (Squeeze without axes) a tensor whose batch dimension comes "
             "from the values of the size input; the TensorFlow executor traces without input values, so that "
             "rank is unknown and the Split after it is refused (UnsupportedOperatorError: the input rank must be "
             "known while tracing)"
       for name in ["test_affine_grid_2d_expanded", "test_affine_grid_2d_align_corners_expanded"]},
}

globals().update(node_test_cases("tensorflow", EXPECTED_FAILURES, __name__))
