"""Level 2: training: datasets, samplers, optimizers."""

from deep500lite.lv2 import events
from deep500lite.lv2.checkpoint import CheckpointEvent, load_checkpoint, save_checkpoint
from deep500lite.lv2.dataset import Dataset, NumpyDataset
from deep500lite.lv2.events import (AccuracyAbortEvent, CSVSummaryWriter, EpochHPSchedule, JSONSummaryWriter,
                                    PlotWriter, StepHPSchedule, TargetAccuracyStop, TerminalBarEvent, TimeBudgetStop,
                                    StepBudgetStop, TrainingEvent)
from deep500lite.lv2.optimizer import Optimizer, ThreeStepOptimizer, UpdateRuleOptimizer, deep500_arguments
from deep500lite.lv2.sampler import BucketSampler, OrderedSampler, Sampler, ShuffleSampler
from deep500lite.lv2.trainer import DefaultTrainerEvents, NonFiniteLossError, Trainer, TrainingStats, test_training

__all__ = ["Dataset", "NumpyDataset", "Sampler", "OrderedSampler", "ShuffleSampler", "BucketSampler",
           "Optimizer", "ThreeStepOptimizer", "UpdateRuleOptimizer", "Trainer", "TrainingStats", "NonFiniteLossError",
           "test_training", "events", "TrainingEvent", "TerminalBarEvent", "EpochHPSchedule", "StepHPSchedule",
           "TargetAccuracyStop", "TimeBudgetStop", "StepBudgetStop", "CSVSummaryWriter", "JSONSummaryWriter", "PlotWriter",
           "CheckpointEvent", "save_checkpoint", "load_checkpoint", "AccuracyAbortEvent", "DefaultTrainerEvents",
           "deep500_arguments"]
