"""Optimizers for the ONNX Runtime executor: deep500lite's reference optimizers, re-exported.

The ``onnxruntime`` inference package has no optimizer of its own (training lives in the
separate ``onnxruntime-training`` build). The ONNX Runtime executor therefore trains with
deep500lite's reference optimizers: the training graph (forward and backward, built by
deep500lite's ONNX autodiff) runs in an ``InferenceSession``, and each step's update is a numpy
computation on the host between two session runs (fetch the gradient, update the parameter,
feed it back). The classes are those of :mod:`deep500lite.frameworks.reference.optimizers`, with
the same formulas and arguments, so ``deep500lite.frameworks.onnxruntime.AdamOptimizer`` is
``deep500lite.frameworks.reference.AdamOptimizer``. They are listed here so that every framework
package has an ``optimizers`` module with its optimizers under the same names.
"""

from deep500lite.frameworks.reference.optimizers import (AcceleGradOptimizer, AdaGradOptimizer, AdamOptimizer,
                                                         GradientDescent, MomentumOptimizer, NesterovOptimizer,
                                                         RMSPropOptimizer)

__all__ = ["GradientDescent", "MomentumOptimizer", "NesterovOptimizer", "AdaGradOptimizer", "RMSPropOptimizer",
           "AdamOptimizer", "AcceleGradOptimizer"]
