"""Level 0 validation: an operator's forward pass, gradient and determinism, with an explicit verdict.

Every check returns a result object whose ``passed`` says whether the operator is correct within
tolerance and whose ``reason`` says why (naming the worst output, input or element when it fails):

- :func:`test_op_forward` (:mod:`.forward`) compares ``op.forward`` with reference outputs;
- :func:`test_op_gradient` (:mod:`.gradient`) compares ``op.backward`` with a numerical gradient
  computed by vectorized central differences (a stacked batch per chunk of elements when the
  operator broadcasts over a leading axis; random-direction checks otherwise);
- :func:`test_op_determinism` (:mod:`.determinism`) reruns ``op.forward`` and checks the outputs
  are bit-identical;
- the result classes are in :mod:`.results`, the default tolerances in :mod:`.common`.

The checks only call ``op.forward`` and ``op.backward``, so they run any operator; a framework's
own operator is made one by :func:`deep500lite.lv1.framework_op.framework_op` (``d5.framework_op``).

See ``docs/validation.md`` for the method, the tolerances and measured timings.
"""

from deep500lite.lv0.validation.common import forward_tolerance, gradient_tolerance
from deep500lite.lv0.validation.determinism import test_op_determinism
from deep500lite.lv0.validation.forward import test_op_forward
from deep500lite.lv0.validation.gradient import projection_miss_probability, test_op_gradient
from deep500lite.lv0.validation.results import DeterminismResult, OpTestResult

__all__ = [
    "OpTestResult",
    "DeterminismResult",
    "test_op_forward",
    "test_op_gradient",
    "test_op_determinism",
    "forward_tolerance",
    "gradient_tolerance",
    "projection_miss_probability",
]
