"""Level 0: operators."""

from deep500lite.lv0.cppop import (CompilationError, CppOp, CppOpError, compile_custom_cppop,
                                  compile_custom_cppop_inline)
from deep500lite.lv0.custom import CUSTOM_DOMAIN, custom_node, register_op, registered_op, unregister_op
from deep500lite.lv0.operator import CustomOp, CustomPythonOp, Operator
from deep500lite.lv0.tensordesc import TensorDescriptor, tensordesc
from deep500lite.lv0.validation import (DeterminismResult, OpTestResult, test_op_determinism, test_op_forward,
                                       test_op_gradient)

__all__ = ["TensorDescriptor", "tensordesc", "Operator", "CustomOp", "CustomPythonOp", "CUSTOM_DOMAIN",
           "register_op", "unregister_op", "registered_op", "custom_node", "compile_custom_cppop",
           "compile_custom_cppop_inline", "CppOp", "CompilationError", "CppOpError", "test_op_forward",
           "test_op_gradient", "test_op_determinism", "OpTestResult", "DeterminismResult"]

_MOVED_TO_LV1 = ("FrameworkOp", "framework_op")


def __getattr__(name: str):
    # FrameworkOp builds executors, so it is level 1 now. The old names keep working as deprecated
    # aliases, resolved on first use (a static import here would make level 0 depend on level 1).
    if name in _MOVED_TO_LV1:
        import importlib
        import warnings

        warnings.warn(f"deep500lite.lv0.{name} moved to level 1: use deep500lite.lv1.{name} (or d5.{name}); "
                      "the old name will be removed.", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module("deep500lite.lv1.framework_op"), name)
    raise AttributeError(f"module 'deep500lite.lv0' has no attribute {name!r}")
