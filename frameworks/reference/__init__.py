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

The data augmentation it re-exports (``RandomCrop``, ``Cutout``, ...) is level 2's
(:mod:`deep500lite.lv2.augmentation`); ``transforms`` stays as its old import path.

The reference executor converts nothing, so it has no ``dtypes.py``, ``native.py`` or
``models.py``.
"""

# Light on purpose: deep500lite.registry imports this package to read SPEC, so the framework itself
# is imported only when one of the names below is first used (lazy_exports).
from deep500lite.frameworkspec import lazy_exports
from deep500lite.frameworks.reference.spec import SPEC

_EXPORTS = {
    "ReferenceExecutor": "executor",
    "from_model": "executor",
    "custom_op": "custom",
    "SUPPORTED_OPS": "ops",
    "executor_class": "executor:ReferenceExecutor",
    "GradientDescent": "optimizers",
    "MomentumOptimizer": "optimizers",
    "NesterovOptimizer": "optimizers",
    "AdaGradOptimizer": "optimizers",
    "RMSPropOptimizer": "optimizers",
    "AdamOptimizer": "optimizers",
    "AcceleGradOptimizer": "optimizers",
    "BatchTransform": "deep500lite.lv2.augmentation",
    "RandomTransform": "deep500lite.lv2.augmentation",
    "RandomCrop": "deep500lite.lv2.augmentation",
    "RandomHorizontalFlip": "deep500lite.lv2.augmentation",
    "Cutout": "deep500lite.lv2.augmentation",
    "Normalize": "deep500lite.lv2.augmentation",
    "Crop": "deep500lite.lv2.augmentation",
    "RandomFlip": "deep500lite.lv2.augmentation",
    "desc_from_tensor": "custom",
    "from_onnx": "executor",
    "DistributedOptimizer": "distributed_optimizers",
    "ConsistentParameterServer": "distributed_optimizers",
    "InconsistentParameterServer": "distributed_optimizers",
    "ConsistentDecentralized": "distributed_optimizers",
    "ModelAverageDecentralized": "distributed_optimizers",
    "ConsistentNeighbors": "distributed_optimizers",
    "ElasticAveraging": "distributed_optimizers",
    "StaleSynchronous": "distributed_optimizers",
}

__all__ = ["ReferenceExecutor", "from_model", "custom_op", "SUPPORTED_OPS", "executor_class", "GradientDescent",
           "MomentumOptimizer", "NesterovOptimizer", "AdaGradOptimizer", "RMSPropOptimizer", "AdamOptimizer",
           "AcceleGradOptimizer", "BatchTransform", "RandomTransform", "RandomCrop", "RandomHorizontalFlip", "Cutout",
           "Normalize", "Crop", "RandomFlip", "desc_from_tensor", "from_onnx", "DistributedOptimizer", "ConsistentParameterServer",
           "InconsistentParameterServer", "ConsistentDecentralized", "ModelAverageDecentralized", "ConsistentNeighbors",
           "ElasticAveraging", "StaleSynchronous"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, SPEC)
