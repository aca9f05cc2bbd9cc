"""ONNX backend node tests on the reference executor (onnx.reference)."""

from conformance import node_test_cases

_ONNX_REFERENCE_BUG = "fails in onnx.reference.ReferenceEvaluator itself, which this executor wraps"

# test name -> why it fails on this executor
EXPECTED_FAILURES: dict[str, str] = {
    **{name: "Bernoulli draws random numbers; ONNX's expected values come from another generator"
       for name in ["test_bernoulli", "test_bernoulli_double", "test_bernoulli_double_expanded",
                    "test_bernoulli_expanded", "test_bernoulli_seed", "test_bernoulli_seed_expanded"]},
    "test_scan_sum": _ONNX_REFERENCE_BUG + " (Scan-8 with a batch axis)",
    "test_if_opt": _ONNX_REFERENCE_BUG + " (an optional sequence output is wrapped in an extra list)",
    "test_loop16_seq_none": _ONNX_REFERENCE_BUG + " (an empty optional sequence as loop state)",
}

globals().update(node_test_cases("reference", EXPECTED_FAILURES, __name__))
