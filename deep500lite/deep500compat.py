"""Deep500's names that deep500lite keeps for its users, in one place: a Deep500 script ports by changing
``import deep500 as d5`` to ``import deep500lite as d5`` (``deep500lite/__init__.py`` re-exports every
name here). Each is an alias of, or a thin form over, deep500lite's own API; the aliases of framework
packages (``deep500lite.frameworks.pytorch``, ``PyTorchGraphExecutor``, ``from_onnx``) stay in those
packages, where Deep500's imports look for them. docs/porting-from-deep500.md lists what changed.
"""

from deep500lite.lv0.cppop import CppOp

__all__: list[str] = []

# Grouped by area; each block adds its imports and extends __all__.
# [training]
from deep500lite.lv2 import AccuracyAbortEvent, DefaultTrainerEvents

__all__ += ["DefaultTrainerEvents", "AccuracyAbortEvent"]
# [/training]
# [data-metrics]
from deep500lite.lv2.dataset import FileListDataset
from deep500lite.lv2.sampler_validation import test_sampler
from deep500lite.metrics import (DatasetBias, DefaultTrainingMetrics, DiffHeatmap, NormDifference,
                                 SamplerEventMetric, VarHeatmap)

__all__ += ["FileListDataset", "test_sampler", "DatasetBias", "SamplerEventMetric", "DefaultTrainingMetrics",
            "NormDifference", "DiffHeatmap", "VarHeatmap"]
# [/data-metrics]
# [ops-custom]
from deep500lite.lv0 import ops
from deep500lite.lv0.ops import (bool_, float16, float32, float64, int8, int16, int32, int64,
                                 uint8, uint16, uint32, uint64)

from deep500lite.lv0.validation.native import default_op_metrics as DefaultOpMetrics

CustomCPPOp = CppOp  # Deep500's name of a loaded C++ operator
CompilableOp = CppOp  # Deep500's compile_custom_cppop* returned one; here they return the compiled CppOp

__all__ += ["ops", "bool_", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
            "uint32", "uint64", "DefaultOpMetrics", "CustomCPPOp", "CompilableOp"]
# [/ops-custom]
# [graph-executors]
from deep500lite.lv1 import OnnxTestParser, parser

__all__ += ["parser", "OnnxTestParser"]
# [/graph-executors]
# [distributed]
from deep500lite.lv3 import (CommunicationVolume, DistributedOptimizer, DistributedSampler,
                             PartitionedDistributedSampler, mpi_end_barrier, mpi_fork)
# Deep500's CommunicationNetwork was MPI over COMM_WORLD; d5.distributed.CommunicationNetwork is the abstract base.
from deep500lite.lv3 import MPICommunicator as CommunicationNetwork
# Deep500's distributed_training sample calls the default events by their older name.
from deep500lite.lv2 import DefaultTrainerEvents as DefaultRunnerEvents

__all__ += ["CommunicationNetwork", "CommunicationVolume", "DistributedOptimizer", "DistributedSampler",
            "PartitionedDistributedSampler", "mpi_end_barrier", "mpi_fork", "DefaultRunnerEvents"]
# [/distributed]
# [transforms]
from deep500lite.lv2 import transforms

__all__ += ["transforms"]
# [/transforms]
