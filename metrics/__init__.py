"""Metrics: timing with raw samples and confidence intervals, accuracy, statistics.

Imported as ``deep500lite.metrics``; the main names are re-exported on ``deep500lite``.
"""

from deep500lite.metrics.accuracy import L1Error, L2Error, MaxError, RelativeL2Error, output_errors
from deep500lite.metrics.base import TestMetric
from deep500lite.metrics.heatmaps import DiffHeatmap, NormDifference, VarHeatmap
from deep500lite.metrics.sampling import DatasetBias, SamplerEventMetric
from deep500lite.metrics.statistics import Summary, median_ci, median_ci_ranks, summarize
from deep500lite.metrics.timing import Measurement, PairedMeasurement, WallclockTime, time_function, time_paired
from deep500lite.metrics.training import (DefaultTrainingMetrics, PeakMemory, StepTimeBreakdown, TestAccuracy,
                                          Throughput, TimeToAccuracy, TrainingAccuracy, TrainingMetric)

__all__ = [
    "TestMetric", "WallclockTime", "Measurement", "PairedMeasurement", "time_function", "time_paired",
    "L1Error", "L2Error", "MaxError", "RelativeL2Error", "output_errors",
    "Summary", "summarize", "median_ci", "median_ci_ranks",
    "TrainingMetric", "TrainingAccuracy", "TestAccuracy", "TimeToAccuracy", "Throughput", "StepTimeBreakdown",
    "PeakMemory", "DefaultTrainingMetrics", "DatasetBias", "SamplerEventMetric",
    "NormDifference", "DiffHeatmap", "VarHeatmap",
]
