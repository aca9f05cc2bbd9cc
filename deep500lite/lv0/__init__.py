"""Level 0: operators."""

from deep500lite.lv0.operator import CustomOp, CustomPythonOp, Operator
from deep500lite.lv0.tensordesc import TensorDescriptor, tensordesc

__all__ = ["TensorDescriptor", "tensordesc", "Operator", "CustomOp", "CustomPythonOp"]
