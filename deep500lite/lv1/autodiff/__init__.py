"""Level 1: deep500lite's own ONNX autodiff (reverse mode, written in standard ONNX operators).

:func:`build_training_model` turns a forward network into one ONNX graph that runs the forward
pass in training mode and then the backward pass from a scalar tensor ``y``. The reference and
ONNX Runtime executors run that graph to implement ``inference_and_backprop``.

Training-mode semantics (shared by every executor):

- BatchNormalization normalizes with the batch statistics (biased variance) and the graph also
  outputs the updated running statistics ``running * momentum + batch_stat * (1 - momentum)``
  under the names ``"<running_mean>__updated"`` and ``"<running_var>__updated"``. The batch
  statistics are written out as ReduceMean/Sub/Mul/Sqrt nodes (the exact formula of
  ``BatchNormalization(training_mode=1)``), so the saved mean and inverse standard deviation are
  available to the backward pass.
- Dropout multiplies by a boolean mask and scales by ``1 / (1 - ratio)``; the backward pass
  reuses the mask. Where the input shape is static the mask is a graph input that the executor
  draws from its own seeded generator at every step (:meth:`TrainingGraph.draw_masks`);
  otherwise ``Dropout(training_mode=True, seed=...)`` draws it inside the graph.

The training graph's inputs are the network's inputs followed by every floating-point
initializer (parameters and running statistics), so the caller feeds its own current values;
integer initializers (shapes, indices) stay initializers. Its outputs are the network's outputs,
``y``, one gradient per parameter of ``network.gradient(y)`` (named by ``gradient_name``) and the
updated running statistics.

>>> from deep500lite import networks
>>> from deep500lite.datasets import dataset_loss
>>> from deep500lite.lv1.autodiff import build_training_model
>>> net, _, out = networks.create_model("mlp", 4, shape=(8,))
>>> net.add_operation(dataset_loss("digits")([out, "label"], "loss"))
>>> model = build_training_model(net, "loss")
>>> [o.name for o in model.graph.output][:4]
['output', 'loss', 'fc1.weight_grad', 'fc1.bias_grad']

The package: :mod:`.builder` (the graph builder), :mod:`.rules` (the per-operator gradient rules),
:mod:`.rules_nn` (activations, LayerNormalization, Clip, Where, Split), :mod:`.rules_index`
(indexing, scatter, selection, Einsum and more), :mod:`.rules_math` (trigonometric and other
elementwise operators, smooth reductions, GroupNormalization, Resize), :mod:`.rules_recurrent`
(LSTM, GRU, RNN),
:mod:`.training` (the training graph, the entry points the executors call).
"""

from deep500lite.lv1.autodiff.gradients import NOT_DIFFERENTIABLE, differentiable_operators, operators_without_gradient
from deep500lite.lv1.autodiff.training import (MIN_OPSET, TrainingGraph, build_training_model, save_backward_graph,
                                               training_graph, updated_name)

__all__ = ["TrainingGraph", "training_graph", "build_training_model", "save_backward_graph",
           "differentiable_operators", "operators_without_gradient", "NOT_DIFFERENTIABLE", "updated_name",
           "MIN_OPSET"]
