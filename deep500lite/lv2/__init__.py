"""Level 2: training: datasets, samplers, optimizers."""

from deep500lite.lv2.dataset import Dataset, NumpyDataset
from deep500lite.lv2.optimizer import Optimizer, ThreeStepOptimizer, UpdateRuleOptimizer
from deep500lite.lv2.sampler import BucketSampler, OrderedSampler, Sampler, ShuffleSampler

__all__ = ["Dataset", "NumpyDataset", "Sampler", "OrderedSampler", "ShuffleSampler", "BucketSampler",
           "Optimizer", "ThreeStepOptimizer", "UpdateRuleOptimizer"]
