"""Level 1: ``verify``, one model on every executor against the reference executor in float64.

- :mod:`.rule`: the accuracy rule shared with the real-model zoo (error relative to scale, judged
  against the model's float32 noise floor);
- :mod:`.float64`: a model's float64 twin, the ground truth;
- :mod:`.localize`: the first node where an executor diverges (observed tensors, gradient probes);
- :mod:`.run`: :func:`verify_model` and the report.

>>> from deep500lite.lv1.verify import verify_model, format_report
>>> result = verify_model("model.onnx", frameworks=["torch", "onnxruntime"], train=True)  # doctest: +SKIP
>>> print(format_report(result))  # doctest: +SKIP
"""

from deep500lite.lv1.verify.float64 import feeds_as_float64, to_float64
from deep500lite.lv1.verify.localize import Divergence, add_gradient_probes, expose_intermediates, localize
from deep500lite.lv1.verify.rule import (FLOOR_FACTOR, GRADIENT_FLOOR, GRADIENT_TOLERANCE, INFERENCE_TOLERANCE,
                                         gradient_errors, gradient_scales, passes, relative_error, tensor_error,
                                         tolerance)
from deep500lite.lv1.verify.run import (LOSSES, ExecutorReport, GroundTruth, VerifyResult, build_executor,
                                        default_executors, format_report, verify_model)

__all__ = ["verify_model", "format_report", "VerifyResult", "ExecutorReport", "GroundTruth", "build_executor",
           "Divergence", "default_executors",
           "LOSSES", "to_float64", "feeds_as_float64", "expose_intermediates", "add_gradient_probes", "localize",
           "relative_error", "tensor_error", "gradient_scales", "gradient_errors", "tolerance", "passes",
           "INFERENCE_TOLERANCE", "GRADIENT_TOLERANCE", "GRADIENT_FLOOR", "FLOOR_FACTOR"]
