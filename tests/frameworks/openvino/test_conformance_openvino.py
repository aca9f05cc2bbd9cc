"""ONNX backend node tests on the OpenVINO executor of the plugin in plugins/deep500lite-openvino.

The operators it declares are those OpenVINO's ONNX frontend reads (``deep500lite_openvino/ops.py``,
measured); every node test whose operators are all declared runs here. The failures below are
OpenVINO's, grouped by what goes wrong (measured with openvino 2026.4.1 and onnx 1.23.2; the
list is strict, so a test that starts passing fails the run). Skipped when the plugin is not installed.
"""

import pytest

pytest.importorskip("deep500lite_openvino",
                    reason="needs the OpenVINO plugin: pip install -e plugins/deep500lite-openvino")
pytest.importorskip("openvino", reason="needs openvino")

from conformance import node_test_cases  # noqa: E402

_OV = "openvino 2026.4 "

# test name (or a regular expression over whole test names) -> why it fails on this executor
EXPECTED_FAILURES: dict[str, str] = {
    # assert: 147 tests
    (
    "test_(?:attention_23_boolmask_fullymasked_row_nan_robustness_expanded|"
    "attention_23_fullymasked_qk_matmul_output_mode3_zero_expanded|"
    "attention_24_fullymasked_qk_matmul_output_mode3_zero_expanded|"
    "attention_24_qk_matmul_output_mode3_softmax_precision_expanded|attention_3d_causal_bf16|"
    "attention_3d_causal_bf16_expanded|attention_3d_local_window|attention_4d_attn_mask_causal_bf16|"
    "attention_4d_attn_mask_causal_bf16_expanded|attention_4d_causal_bf16|"
    "attention_4d_causal_bf16_expanded|"
    "attention_4d_causal_nonpad_negative_offset_structural_empty_expanded|"
    "attention_4d_causal_padded_kv_bf16|attention_4d_causal_padded_kv_bf16_expanded|"
    "attention_4d_padded_kv_bf16|attention_4d_padded_kv_bf16_expanded|"
    "attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal|"
    "attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal|attention_bidirectional_window|"
    "attention_causal_boolmask_nan_robustness_expanded|attention_local_window|"
    "attention_local_window_ext_cache_rank2_mask|attention_local_window_ext_cache_rank3_head_mask|"
    "attention_local_window_ext_cache_rank4_batch_mask|attention_local_window_gqa_rank4_mask|"
    "attention_local_window_gqa_rank4_mask_expanded|attention_local_window_rank1_boolean_mask|"
    "attention_local_window_with_past|bernoulli_seed|bitshift_left_int32_shift_ge_width|"
    "bitshift_left_int8_overflow|bitshift_left_int8_shift_ge_width|bitshift_right_int32_negative_input|"
    "bitshift_right_int32_negative_shift|bitshift_right_int32_shift_ge_width|"
    "bitshift_right_int8_negative_input|bitshift_right_int8_negative_shift|"
    "bitshift_right_int8_shift_ge_width|cast_DOUBLE_to_FLOAT|cast_FLOAT16_to_DOUBLE|"
    "cast_FLOAT16_to_FLOAT4E2M1|cast_FLOAT16_to_FLOAT8E4M3FN|cast_FLOAT16_to_FLOAT8E5M2|"
    "cast_FLOAT16_to_INT4|cast_FLOAT16_to_UINT4|cast_FLOAT8E4M3FN_to_FLOAT|cast_FLOAT8E4M3FN_to_FLOAT16|"
    "cast_FLOAT8E5M2_to_FLOAT|cast_FLOAT8E5M2_to_FLOAT16|cast_FLOAT_to_BFLOAT16|cast_FLOAT_to_DOUBLE|"
    "cast_FLOAT_to_FLOAT4E2M1|cast_FLOAT_to_FLOAT8E4M3FN|cast_FLOAT_to_FLOAT8E5M2|cast_FLOAT_to_INT4|"
    "cast_FLOAT_to_UINT4|cast_e8m0_FLOAT16_to_FLOAT8E8M0|cast_e8m0_FLOAT8E8M0_to_FLOAT|"
    "cast_e8m0_FLOAT8E8M0_to_FLOAT16|cast_e8m0_FLOAT_to_FLOAT8E8M0|"
    "cast_no_saturate_FLOAT16_to_FLOAT8E4M3FN|cast_no_saturate_FLOAT16_to_FLOAT8E5M2|"
    "cast_no_saturate_FLOAT_to_FLOAT8E4M3FN|cast_no_saturate_FLOAT_to_FLOAT8E5M2|"
    "castlike_DOUBLE_to_FLOAT|castlike_DOUBLE_to_FLOAT_expanded|castlike_FLOAT16_to_DOUBLE|"
    "castlike_FLOAT16_to_DOUBLE_expanded|castlike_FLOAT16_to_FLOAT4E2M1_expanded|"
    "castlike_FLOAT16_to_FLOAT8E4M3FN_expanded|castlike_FLOAT16_to_FLOAT8E5M2_expanded|"
    "castlike_FLOAT16_to_INT4_expanded|castlike_FLOAT16_to_UINT4_expanded|castlike_FLOAT8E4M3FN_to_FLOAT|"
    "castlike_FLOAT8E4M3FN_to_FLOAT16|castlike_FLOAT8E4M3FN_to_FLOAT16_expanded|"
    "castlike_FLOAT8E4M3FN_to_FLOAT_expanded|castlike_FLOAT8E5M2_to_FLOAT|castlike_FLOAT8E5M2_to_FLOAT16|"
    "castlike_FLOAT8E5M2_to_FLOAT16_expanded|castlike_FLOAT8E5M2_to_FLOAT_expanded|"
    "castlike_FLOAT_to_BFLOAT16|castlike_FLOAT_to_BFLOAT16_expanded|castlike_FLOAT_to_DOUBLE|"
    "castlike_FLOAT_to_DOUBLE_expanded|castlike_FLOAT_to_FLOAT4E2M1_expanded|"
    "castlike_FLOAT_to_FLOAT8E4M3FN_expanded|castlike_FLOAT_to_FLOAT8E5M2_expanded|"
    "castlike_FLOAT_to_INT4_expanded|castlike_FLOAT_to_UINT4_expanded|"
    "castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN_expanded|"
    "castlike_no_saturate_FLOAT16_to_FLOAT8E5M2_expanded|"
    "castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN_expanded|"
    "castlike_no_saturate_FLOAT_to_FLOAT8E5M2_expanded|celu_bfloat16_expanded|compress_bfloat16|dft|"
    "dft_axis|dft_axis_opset19|dft_inverse|dft_inverse_opset19|dft_irfft|dft_irfft_opset19|dft_opset19|"
    "dft_rfft|dft_rfft_opset19|dropout_default|dropout_default_mask|dropout_default_mask_ratio|"
    "dropout_default_old|dropout_default_ratio|dropout_random_old|dynamicquantizelinear|"
    "dynamicquantizelinear_expanded|einsum_batch_matmul_bfloat16|einsum_sum_bfloat16|"
    "einsum_transpose_bfloat16|gru_batchwise|lstm_batchwise|lstm_with_peepholes|"
    "maxpool_2d_ceil_output_size_reduce_by_one|nonmaxsuppression_iou_threshold_boundary|"
    "onehot_with_bfloat16_values|quantizelinear_e4m3fn|quantizelinear_e5m2|reduce_max_empty_set|"
    "resize_downsample_scales_cubic_A_n0p5_exclude_outside|resize_downsample_scales_cubic_align_corners|"
    "resize_downsample_scales_cubic_antialias|resize_downsample_scales_linear_align_corners|"
    "resize_downsample_scales_linear_antialias|resize_downsample_sizes_cubic_antialias|"
    "resize_downsample_sizes_linear_antialias|resize_downsample_sizes_nearest_not_larger|"
    "resize_downsample_sizes_nearest_not_smaller|resize_upsample_scales_cubic_A_n0p5_exclude_outside|"
    "resize_upsample_sizes_nearest_not_larger|resize_upsample_sizes_nearest_not_smaller|"
    "reversesequence_bfloat16|roialign_mode_max|simple_rnn_batchwise|spacetodepth_crd_mode_example|tile|"
    "top_k_same_values|top_k_same_values_2d|top_k_same_values_largest|unique_bfloat16_sorted_without_axis)"
    ): _OV + "computes a result that differs from ONNX's expected output (values beyond the suite's tolerance, or another dtype or shape)",
    # frontend: 59 tests
    (
    "test_(?:affine_grid_2d_align_corners_expanded|affine_grid_2d_expanded|affine_grid_3d_align_corners_expanded|"
    "affine_grid_3d_expanded|bernoulli|bernoulli_double|cast_FLOAT16_to_FLOAT8E4M3FNUZ|"
    "cast_FLOAT16_to_FLOAT8E5M2FNUZ|cast_FLOAT16_to_INT2|cast_FLOAT16_to_UINT2|"
    "cast_FLOAT_to_FLOAT8E4M3FNUZ|cast_FLOAT_to_FLOAT8E5M2FNUZ|cast_FLOAT_to_INT2|cast_FLOAT_to_UINT2|"
    "cast_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ|cast_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ|"
    "cast_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ|cast_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ|celu_bfloat16|"
    "celu_float16|col2im_5d|gridsample_volumetric_bilinear_align_corners_0|"
    "gridsample_volumetric_bilinear_align_corners_1|gridsample_volumetric_nearest_align_corners_0|"
    "gridsample_volumetric_nearest_align_corners_1|linear_attention_decode_step_expanded|"
    "linear_attention_delta_expanded|linear_attention_fp16_expanded|"
    "linear_attention_gated_delta_beta_scalar_expanded|linear_attention_gated_delta_expanded|"
    "linear_attention_gated_delta_gqa_expanded|linear_attention_gated_delta_mqa_expanded|"
    "linear_attention_gated_expanded|linear_attention_gated_per_head_decay_expanded|"
    "linear_attention_linear_expanded|linear_attention_linear_t1_no_past_expanded|"
    "linear_attention_no_past_explicit_zeros_expanded|linear_attention_prefill_with_past_expanded|"
    "mod_float16_mixed_sign_fmod_0|mod_float32_mixed_sign_fmod_0|mod_float64_mixed_sign_fmod_0|"
    "mod_float_edge_cases_fmod_0_float16|mod_float_edge_cases_fmod_0_float32|"
    "mod_float_edge_cases_fmod_0_float64|quantizelinear_blocked_symmetric|quantizelinear_float4e2m1|"
    "resize_downsample_scales_linear_half_pixel_symmetric|resize_tf_crop_and_resize|"
    "resize_tf_crop_and_resize_axes_2_3|resize_tf_crop_and_resize_axes_3_2|"
    "resize_tf_crop_and_resize_extrapolation_value|resize_upsample_scales_linear_half_pixel_symmetric|"
    "training_dropout|training_dropout_default|training_dropout_default_mask|training_dropout_mask|"
    "training_dropout_zero_ratio|training_dropout_zero_ratio_mask|wrap_pad)"
    ): _OV + "ONNX frontend refuses this form of the operator (an attribute, input type or function expansion it does not translate)",
    # dtype: 96 tests
    (
    "test_(?:cast_FLOAT4E2M1_to_FLOAT|cast_FLOAT4E2M1_to_FLOAT16|cast_FLOAT8E4M3FNUZ_to_FLOAT|"
    "cast_FLOAT8E4M3FNUZ_to_FLOAT16|cast_FLOAT8E5M2FNUZ_to_FLOAT|cast_FLOAT8E5M2FNUZ_to_FLOAT16|"
    "cast_INT2_to_FLOAT|cast_INT2_to_FLOAT16|cast_INT2_to_INT8|cast_INT4_to_FLOAT|cast_INT4_to_FLOAT16|"
    "cast_INT4_to_INT8|cast_UINT2_to_FLOAT|cast_UINT2_to_FLOAT16|cast_UINT2_to_UINT8|cast_UINT4_to_FLOAT|"
    "cast_UINT4_to_FLOAT16|cast_UINT4_to_UINT8|castlike_FLOAT16_to_FLOAT4E2M1|"
    "castlike_FLOAT16_to_FLOAT8E4M3FN|castlike_FLOAT16_to_FLOAT8E4M3FNUZ|"
    "castlike_FLOAT16_to_FLOAT8E4M3FNUZ_expanded|castlike_FLOAT16_to_FLOAT8E5M2|"
    "castlike_FLOAT16_to_FLOAT8E5M2FNUZ|castlike_FLOAT16_to_FLOAT8E5M2FNUZ_expanded|"
    "castlike_FLOAT16_to_INT2|castlike_FLOAT16_to_INT2_expanded|castlike_FLOAT16_to_INT4|"
    "castlike_FLOAT16_to_UINT2|castlike_FLOAT16_to_UINT2_expanded|castlike_FLOAT16_to_UINT4|"
    "castlike_FLOAT4E2M1_to_FLOAT|castlike_FLOAT4E2M1_to_FLOAT16|castlike_FLOAT4E2M1_to_FLOAT16_expanded|"
    "castlike_FLOAT4E2M1_to_FLOAT_expanded|castlike_FLOAT8E4M3FNUZ_to_FLOAT|"
    "castlike_FLOAT8E4M3FNUZ_to_FLOAT16|castlike_FLOAT8E4M3FNUZ_to_FLOAT16_expanded|"
    "castlike_FLOAT8E4M3FNUZ_to_FLOAT_expanded|castlike_FLOAT8E5M2FNUZ_to_FLOAT|"
    "castlike_FLOAT8E5M2FNUZ_to_FLOAT16|castlike_FLOAT8E5M2FNUZ_to_FLOAT16_expanded|"
    "castlike_FLOAT8E5M2FNUZ_to_FLOAT_expanded|castlike_FLOAT_to_FLOAT4E2M1|"
    "castlike_FLOAT_to_FLOAT8E4M3FN|castlike_FLOAT_to_FLOAT8E4M3FNUZ|"
    "castlike_FLOAT_to_FLOAT8E4M3FNUZ_expanded|castlike_FLOAT_to_FLOAT8E5M2|"
    "castlike_FLOAT_to_FLOAT8E5M2FNUZ|castlike_FLOAT_to_FLOAT8E5M2FNUZ_expanded|castlike_FLOAT_to_INT2|"
    "castlike_FLOAT_to_INT2_expanded|castlike_FLOAT_to_INT4|castlike_FLOAT_to_UINT2|"
    "castlike_FLOAT_to_UINT2_expanded|castlike_FLOAT_to_UINT4|castlike_INT2_to_FLOAT|"
    "castlike_INT2_to_FLOAT16|castlike_INT2_to_FLOAT16_expanded|castlike_INT2_to_FLOAT_expanded|"
    "castlike_INT2_to_INT8|castlike_INT2_to_INT8_expanded|castlike_INT4_to_FLOAT|"
    "castlike_INT4_to_FLOAT16|castlike_INT4_to_FLOAT16_expanded|castlike_INT4_to_FLOAT_expanded|"
    "castlike_INT4_to_INT8|castlike_INT4_to_INT8_expanded|castlike_UINT2_to_FLOAT|"
    "castlike_UINT2_to_FLOAT16|castlike_UINT2_to_FLOAT16_expanded|castlike_UINT2_to_FLOAT_expanded|"
    "castlike_UINT2_to_UINT8|castlike_UINT2_to_UINT8_expanded|castlike_UINT4_to_FLOAT|"
    "castlike_UINT4_to_FLOAT16|castlike_UINT4_to_FLOAT16_expanded|castlike_UINT4_to_FLOAT_expanded|"
    "castlike_UINT4_to_UINT8|castlike_UINT4_to_UINT8_expanded|"
    "castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN|castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ|"
    "castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FNUZ_expanded|castlike_no_saturate_FLOAT16_to_FLOAT8E5M2|"
    "castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ|"
    "castlike_no_saturate_FLOAT16_to_FLOAT8E5M2FNUZ_expanded|castlike_no_saturate_FLOAT_to_FLOAT8E4M3FN|"
    "castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ|castlike_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ_expanded|"
    "castlike_no_saturate_FLOAT_to_FLOAT8E5M2|castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ|"
    "castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ_expanded|dequantizelinear_int2|dequantizelinear_uint2|"
    "quantizelinear_int2|quantizelinear_uint2)"
    ): _OV + "has no element type for these tensors (2- and 4-bit integers, float4, the FNUZ float8 types) or fails converting them",
    # dynrank: 13 tests
    (
    "test_(?:identity_opt|identity_sequence|reduce_log_sum_asc_axes|reduce_log_sum_asc_axes_expanded|"
    "reduce_log_sum_desc_axes|reduce_log_sum_desc_axes_expanded|unsqueeze_axis_0|unsqueeze_axis_1|"
    "unsqueeze_axis_2|unsqueeze_negative_axes|unsqueeze_three_axes|unsqueeze_two_axes|"
    "unsqueeze_unsorted_axes)"
    ): _OV + "CPU plugin needs a static rank where these tests give a dynamic one (optional and sequence inputs, axes given as inputs)",
    # string: 2 tests
    (
    "test_(?:equal_string|equal_string_broadcast)"
    ): _OV + "CPU plugin has no string kernels for Equal",
    # other: 12 tests
    (
    "test_(?:dequantizelinear_e4m3fn|dequantizelinear_e4m3fn_float16|dequantizelinear_e4m3fn_zero_point|"
    "dequantizelinear_e5m2|dequantizelinear_float4e2m1|dequantizelinear_int4|dequantizelinear_uint4|"
    "linear_attention_explicit_scale_expanded|quantizelinear_int4|quantizelinear_uint4|"
    "range_bfloat16_type_positive_delta|range_bfloat16_type_positive_delta_expanded)"
    ): _OV + "CPU plugin fails compiling the expanded graph (a node it cannot create)",
}

globals().update(node_test_cases("openvino", EXPECTED_FAILURES, __name__))
