"""ONNX backend node tests on the jax executor.

Inputs that fix shapes (a ``Reshape`` target, ``axes``, ``Resize`` scales fed at run time) become
constants of the trace (see ``JaxExecutor._execute``), so these tests run as written.
"""

import pytest

pytest.importorskip("jax", reason="needs jax")

from conformance import declared_node_tests, node_test_cases  # noqa: E402

_NO_JAX_DTYPE = "the jax executor takes no {} arrays (see deep500lite.frameworks.jax.dtypes)"
_PACKED = ["INT2", "INT4", "UINT2", "UINT4", "FLOAT4E2M1"]
_PARTNERS = ("FLOAT", "FLOAT16", "INT8", "UINT8")


def _cast_tests(types, reason):
    """Cast and CastLike tests (CastLike also expanded) from or to one of ``types``."""
    names = {}
    for t in types:
        for other in _PARTNERS:
            for a, b in ((other, t), (t, other)):
                names[f"test_cast_{a}_to_{b}"] = reason
                names[f"test_castlike_{a}_to_{b}"] = reason
                names[f"test_castlike_{a}_to_{b}_expanded"] = reason
    return names


def _declared(names):
    declared = set(declared_node_tests("jax"))
    return {k: v for k, v in names.items() if k in declared}


# test name -> why it fails on this executor
EXPECTED_FAILURES: dict[str, str] = _declared({
    **_cast_tests(_PACKED, _NO_JAX_DTYPE.format("2- and 4-bit (int2/int4/uint2/uint4/float4)")),
    **{f"test_cast_e8m0_{n}": _NO_JAX_DTYPE.format("float8_e8m0 (with ONNX's rounding modes)")
       for n in ["FLOAT16_to_FLOAT8E8M0", "FLOAT8E8M0_to_FLOAT16", "FLOAT8E8M0_to_FLOAT", "FLOAT_to_FLOAT8E8M0"]},
    "test_equal_string": _NO_JAX_DTYPE.format("string"),
    "test_equal_string_broadcast": _NO_JAX_DTYPE.format("string"),
    "test_identity_opt": "optional values are not arrays; the jax executor takes arrays only",
    "test_identity_sequence": "sequence values are not arrays; the jax executor takes arrays only",
    **{name: "training-mode Dropout draws its mask from JAX's PRNG; ONNX's expected values come from numpy's"
       for name in ["test_training_dropout", "test_training_dropout_default",
                    "test_training_dropout_default_mask", "test_training_dropout_mask"]},
})

globals().update(node_test_cases("jax", EXPECTED_FAILURES, __name__))
