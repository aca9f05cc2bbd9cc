"""ONNX backend node tests on the ONNX Runtime executor.

What this executor declares is version- and type-aware (``frameworks/onnxruntime/ops/__init__.py``):
a node test runs when onnxruntime has a CPU kernel for each operator version and element type it
uses. The failures below are onnxruntime's own, each with its reason.
"""

import pytest

pytest.importorskip("onnxruntime", reason="needs onnxruntime")

from conformance import node_test_cases  # noqa: E402

_ORT = "onnxruntime 1.31 "

# test name (or a regular expression over whole test names) -> why it fails on this executor
EXPECTED_FAILURES: dict[str, str] = {
    r"test_castlike_.*(BFLOAT16|FLOAT8|FLOAT4E2M1|INT2|INT4).*|test_range_bfloat16_type_positive_delta_expanded":
        _ORT + "Python API cannot take or return numpy arrays of the ml_dtypes types (bfloat16, float8, "
               "4- and 2-bit) these tests feed",
    r"test_attention_.*(local_window|bidirectional_window|diff_heads_mask4d_padded_kv|qk_matmul_bias_[34]d_mask_causal).*(?<!_expanded)":
        _ORT + "Attention kernel predates these options of the newest Attention (windows, padded KV masks)",
    "test_attention_4d_causal_fp16": _ORT + "float16 Attention rounds differently from ONNX's reference (1-2 ulp)",
    r"test_bernoulli.*": "Bernoulli draws random numbers; ONNX's expected values come from numpy's generator",
    r"test_training_dropout(_default)?(_mask)?": "training-mode Dropout draws a random mask; ONNX's expected values come from numpy",
    r"test_(gru|lstm|simple_rnn)_batchwise": _ORT + "RNN kernels do not implement layout=1 (batch-first)",
    r"test_dft.*|test_stft.*": _ORT + "DFT/STFT results differ from ONNX's reference for these cases",
    r"test_resize_downsample_scales_(cubic|linear)_align_corners": _ORT + "Resize differs from ONNX's "
                                                                          "reference when downsampling with align_corners",
    r"test_roialign_.*": _ORT + "RoiAlign differs from ONNX's reference (coordinate rounding)",
    "test_maxunpool_export_with_output_shape": _ORT + "MaxUnpool places values differently with output_shape",
    "test_convinteger_with_padding": _ORT + "ConvInteger rejects padding with a non-zero zero point",
    "test_reduce_max_empty_set_bool": _ORT + "refuses ReduceMax over an empty set of booleans",
    r"test_swiglu(_alpha)?_expanded": _ORT + "does not inline the Swish-24 function these expansions use",
    r"test_strnormalizer_export_monday_(casesensintive_(lower|upper)|empty_output|insensintive_upper_twodim)":
        _ORT + "StringNormalizer changes case through an OS locale (en_US.UTF-8) this machine lacks",
}

globals().update(node_test_cases("onnxruntime", EXPECTED_FAILURES, __name__))
