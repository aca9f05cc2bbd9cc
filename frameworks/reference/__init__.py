"""The reference executor: numpy, through ``onnx.reference.ReferenceEvaluator``.

It needs no framework, runs every operator ONNX's reference implementation covers, and is the
yardstick the other executors are compared with. It is slow by design (pure Python and numpy);
use it for correctness, not for speed. Device: CPU only.

Role modules (the same names in every framework package; see ``docs/architecture.md``):

- ``executor.py``: :class:`ReferenceExecutor` and ``from_model``.
- ``ops/``: ``SUPPORTED_OPS`` (what ``onnx.reference`` implements) and the faster numpy kernels
  that replace some of its operators.
- ``custom.py``: ``custom_op``, a deep500lite custom operator as an ``onnx.reference`` operator.
- ``optimizers.py``: the reference optimizers in numpy, which run on every executor.
- ``bench.py``: this framework's benchmark runners.
- ``transforms.py`` (reference only): data augmentation in numpy, for any framework's samplers.
- ``perf.py`` (reference only): ``python -m deep500lite.frameworks.reference.perf``, the LeNet
  training step against torch's and the gradient check's time (benchmarks, issue 17).

The reference executor converts nothing, so it has no ``dtypes.py``, ``native.py`` or
``models.py``.
"""

from deep500lite.frameworks.reference.custom import custom_op
from deep500lite.frameworks.reference.executor import ReferenceExecutor, from_model
from deep500lite.frameworks.reference.ops import SUPPORTED_OPS
from deep500lite.frameworks.reference.transforms import (BatchTransform, Cutout, Normalize, RandomCrop,
                                                         RandomHorizontalFlip, RandomTransform)
from deep500lite.frameworks.reference.optimizers import (AcceleGradOptimizer, AdaGradOptimizer, AdamOptimizer,
                                                         GradientDescent, MomentumOptimizer, NesterovOptimizer,
                                                         RMSPropOptimizer)

executor_class = ReferenceExecutor

__all__ = ["ReferenceExecutor", "from_model", "custom_op", "SUPPORTED_OPS", "executor_class", "GradientDescent",
           "MomentumOptimizer", "NesterovOptimizer", "AdaGradOptimizer", "RMSPropOptimizer", "AdamOptimizer",
           "AcceleGradOptimizer", "BatchTransform", "RandomTransform", "RandomCrop", "RandomHorizontalFlip", "Cutout",
           "Normalize"]

# Deep500's own names (issue 15), grouped by area; each block adds its imports and extends __all__.
# [training]
# [/training]
# [data-metrics]
from deep500lite.frameworks.reference.transforms import Crop, RandomFlip  # noqa: E402

__all__ += ["Crop", "RandomFlip"]
# [/data-metrics]
# [ops-custom]
from deep500lite.frameworks.reference.custom import desc_from_tensor  # noqa: E402

__all__ += ["desc_from_tensor"]
# [/ops-custom]
# [graph-executors]
from deep500lite.frameworks.reference.executor import from_onnx  # noqa: E402

__all__ += ["from_onnx"]
# [/graph-executors]
# [distributed]
from deep500lite.frameworks.reference.distributed_optimizers import (  # noqa: E402
    ConsistentDecentralized, ConsistentNeighbors, ConsistentParameterServer, DistributedOptimizer, ElasticAveraging,
    InconsistentParameterServer, ModelAverageDecentralized, StaleSynchronous)

__all__ += ["DistributedOptimizer", "ConsistentParameterServer", "InconsistentParameterServer",
            "ConsistentDecentralized", "ModelAverageDecentralized", "ConsistentNeighbors", "ElasticAveraging",
            "StaleSynchronous"]
# [/distributed]
