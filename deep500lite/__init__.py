"""deep500lite: one framework-agnostic deep-learning experiment, every framework, honest numbers.

``import deep500lite as d5`` needs only numpy, onnx and protobuf; framework packages are
imported when an executor for them is asked for (``d5.executor(net, "torch")``).

Levels: operators (:mod:`deep500lite.lv0`), networks and executors (:mod:`deep500lite.lv1`),
training (:mod:`deep500lite.lv2`), distributed training (:mod:`deep500lite.lv3`, also
``d5.distributed``); metrics in :mod:`deep500lite.metrics`.
"""

from deep500lite import lv3 as distributed
from deep500lite.errors import (CheckpointError, CommunicationTimeout, CorruptFileError, Deep500Error, DeviceError,
                                ExampleParseError, ExecutionError, FeedError, FrameworkNotAvailableError, JobTimeout,
                                MissingDatasetError, ModelError, UnsupportedOperatorError, UserAttributeError,
                                UserError, UserKeyError, UserTypeError)
from deep500lite.lv0 import (CUSTOM_DOMAIN, CompilationError, CppOp, CppOpError, CustomOp, CustomPythonOp, Operator,
                             TensorDescriptor, compile_custom_cppop, compile_custom_cppop_inline, custom_node,
                             register_op, registered_op, tensordesc, unregister_op)
from deep500lite.lv0 import (DeterminismResult, OpTestResult, test_op_determinism, test_op_forward,
                             test_op_gradient)
from deep500lite.lv1 import (CPUDevice, Device, ExecutorComparison, FrameworkOp, GPUDevice, GraphExecutor, Network,
                             framework_op, load_model, test_executor_backprop, test_executor_inference)
from deep500lite.lv2 import (BucketSampler, Dataset, NumpyDataset, Optimizer, OrderedSampler, Sampler,
                             ShuffleSampler, ThreeStepOptimizer, UpdateRuleOptimizer)
from deep500lite.lv2 import (CheckpointEvent, CSVSummaryWriter, EpochHPSchedule, JSONSummaryWriter, NonFiniteLossError,
                             PlotWriter, StepHPSchedule, TargetAccuracyStop, TerminalBarEvent, TimeBudgetStop, StepBudgetStop,
                             Trainer,
                             TrainingEvent, TrainingStats, load_checkpoint, save_checkpoint, test_training)
from deep500lite.lv2 import events as training_events
from deep500lite.metrics import (PeakMemory, StepTimeBreakdown, TestAccuracy, Throughput, TimeToAccuracy,
                                 TrainingAccuracy, TrainingMetric)
from deep500lite.metrics import (L1Error, L2Error, MaxError, Measurement, RelativeL2Error, TestMetric,
                                 WallclockTime, summarize, time_function)
from deep500lite.recipe import check_determinism, load_recipe, run_recipe, train_recipe
from deep500lite.registry import FRAMEWORKS, executor, is_framework_available

from deep500lite.version import __version__  # noqa: E402

__all__ = [
    "__version__",
    # level 0
    "tensordesc", "TensorDescriptor", "Operator", "CustomOp", "CustomPythonOp", "CUSTOM_DOMAIN", "register_op",
    "unregister_op", "registered_op", "custom_node", "compile_custom_cppop", "compile_custom_cppop_inline",
    "CppOp", "CompilationError", "CppOpError", "test_op_forward", "test_op_gradient", "test_op_determinism",
    "framework_op", "OpTestResult", "DeterminismResult", "FrameworkOp",
    # level 1
    "Network", "load_model", "GraphExecutor", "executor", "Device", "CPUDevice", "GPUDevice",
    "FRAMEWORKS", "is_framework_available", "test_executor_inference", "test_executor_backprop", "ExecutorComparison",
    # level 2
    "Dataset", "NumpyDataset", "Sampler", "OrderedSampler", "ShuffleSampler", "BucketSampler",
    "Optimizer", "ThreeStepOptimizer", "UpdateRuleOptimizer", "Trainer", "TrainingStats", "NonFiniteLossError",
    "test_training", "training_events", "TrainingEvent", "TerminalBarEvent", "EpochHPSchedule", "StepHPSchedule",
    "TargetAccuracyStop", "TimeBudgetStop", "StepBudgetStop", "CSVSummaryWriter", "JSONSummaryWriter", "PlotWriter",
    "CheckpointEvent", "save_checkpoint", "load_checkpoint",
    # recipes
    "run_recipe", "load_recipe", "train_recipe", "check_determinism",
    # level 3
    "distributed",
    # metrics
    "TestMetric", "WallclockTime", "Measurement", "time_function", "summarize",
    "L1Error", "L2Error", "MaxError", "RelativeL2Error", "TrainingMetric", "TrainingAccuracy", "TestAccuracy",
    "TimeToAccuracy", "Throughput", "StepTimeBreakdown", "PeakMemory",
    # errors
    "Deep500Error", "UserError", "ModelError", "FeedError", "UnsupportedOperatorError",
    "FrameworkNotAvailableError", "DeviceError", "UserTypeError", "UserKeyError", "UserAttributeError",
    "MissingDatasetError", "CorruptFileError", "ExampleParseError", "CheckpointError", "CommunicationTimeout",
    "JobTimeout", "ExecutionError",
]

# Deep500's own names (gathered in deep500lite.deep500compat): ``import deep500lite as d5`` offers them too.
from deep500lite import deep500compat as _deep500compat  # noqa: E402
from deep500lite.deep500compat import *  # noqa: E402,F401,F403

__all__ += _deep500compat.__all__
