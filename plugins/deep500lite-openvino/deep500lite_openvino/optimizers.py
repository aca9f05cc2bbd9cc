"""Optimizers for the OpenVINO executor: deep500lite's reference optimizers (numpy, on the host), re-exported.

OpenVINO is an inference runtime with no optimizers; the executor runs the ONNX autodiff's
training graph, and these classes fetch its gradients, update the parameters in numpy and feed
them back, as on the reference executor.
"""

from deep500lite.frameworks.reference.optimizers import (AcceleGradOptimizer, AdaGradOptimizer, AdamOptimizer,
                                                         GradientDescent, MomentumOptimizer, NesterovOptimizer,
                                                         RMSPropOptimizer)

__all__ = ["GradientDescent", "MomentumOptimizer", "NesterovOptimizer", "AdaGradOptimizer", "RMSPropOptimizer",
           "AdamOptimizer", "AcceleGradOptimizer"]
