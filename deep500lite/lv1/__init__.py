"""Level 1: networks and graph executors."""

from deep500lite.lv1 import parser
from deep500lite.lv1.autodiff import build_training_model, save_backward_graph
from deep500lite.lv1.device import CPUDevice, Device, GPUDevice, as_device
from deep500lite.lv1.executor import GraphExecutor
from deep500lite.lv1.framework_op import FrameworkOp, framework_op
from deep500lite.lv1.network import Network, load_model
from deep500lite.lv1.onnx_test_parser import OnnxTest, OnnxTestData, OnnxTestParser
from deep500lite.lv1.validation import (ExecutorComparison, InferenceResults, test_executor_backprop,
                                        test_executor_inference)
from deep500lite.lv1.value_info import TensorDataType, ValueInfo

__all__ = ["Network", "load_model", "GraphExecutor", "Device", "CPUDevice", "GPUDevice", "as_device",
           "test_executor_inference", "test_executor_backprop", "ExecutorComparison", "InferenceResults",
           "build_training_model", "save_backward_graph", "FrameworkOp", "framework_op",
           "parser", "OnnxTestParser", "OnnxTest", "OnnxTestData", "ValueInfo", "TensorDataType"]
