"""Optimizers for the ONNX Runtime executor: deep500lite's reference optimizers, re-exported.

The ``onnxruntime`` inference package has no optimizer of its own (training lives in the
separate ``onnxruntime-training`` build). The ONNX Runtime executor therefore trains with
deep500lite's reference optimizers, the classes of
:mod:`deep500lite.frameworks.reference.optimizers` (the same formulas and arguments, so
``deep500lite.frameworks.onnxruntime.AdamOptimizer`` is ``deep500lite.frameworks.reference.AdamOptimizer``).
They are listed here so that every framework package has an ``optimizers`` module with its
optimizers under the same names.

On the ONNX Runtime executor, ``GradientDescent``, ``MomentumOptimizer``, ``NesterovOptimizer``,
``AdaGradOptimizer``, ``RMSPropOptimizer`` and ``AdamOptimizer`` (these classes exactly, without a
``gradient_modifier``) run fused: the update is written into the training graph, one session run
per step computes loss, gradients, new parameters and new optimizer state, and the state stays in
ONNX Runtime's memory between steps (:mod:`.training_session`). ``AcceleGradOptimizer``,
subclasses and optimizers with a ``gradient_modifier`` take the host path: the training graph
(forward and backward, built by deep500lite's ONNX autodiff) runs in an ``InferenceSession`` and
the update is a numpy computation between two runs (fetch the gradient, update the parameter,
feed it back). Both paths give the same values up to float32 round-off.
"""

from deep500lite.frameworks.reference.optimizers import (AcceleGradOptimizer, AdaGradOptimizer, AdamOptimizer,
                                                         GradientDescent, MomentumOptimizer, NesterovOptimizer,
                                                         RMSPropOptimizer)

__all__ = ["GradientDescent", "MomentumOptimizer", "NesterovOptimizer", "AdaGradOptimizer", "RMSPropOptimizer",
           "AdamOptimizer", "AcceleGradOptimizer"]
