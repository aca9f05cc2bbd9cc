"""Plain JAX versions of benchmark models (LeNet-5, CIFAR ResNet-20), for native baselines.

``deep500lite bench overhead`` times these functions, compiled with ``jax.jit``, against the
same models as ONNX run by the deep500lite JAX executor. No Flax: a model is a pure function
``forward(params, state, x, batch_stats)`` over a parameter pytree, as one writes it in plain JAX.

The functions have the same names and arguments as :mod:`deep500lite.frameworks.torch.models`:
``lenet(classes, input_shape)`` and ``resnet20(classes, input_shape)`` return the model (here a
:class:`JaxModel`), ``export_onnx(model, ...)`` writes it as ONNX. ``input_shape`` is one
sample's shape **channels-first (C, H, W)**, as for torch: the layers and the parameter layout
(``OIHW`` convolution kernels, ``(out, in)`` dense weights) are those of deep500lite's own
networks (:func:`deep500lite.networks.create_model` ``"lenet"`` and ``"resnet"`` with depth 20),
and the parameter pytree is a dict keyed by the ONNX initializer names, so weights move both
ways: :func:`export_onnx` writes a model's weights into the ONNX graph and
:func:`load_onnx_weights` reads an ONNX graph's weights into a model.

Batch normalization: with ``batch_stats=False`` (inference) it normalizes with the running
statistics; with ``batch_stats=True`` (training, as every deep500lite executor trains, see
docs/training.md) with the batch's statistics (biased variance), and the running statistics
are updated by ONNX's rule (momentum 0.9) into the returned state.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import optax
from onnx import numpy_helper

from deep500lite.errors import UserError

__all__ = ["JaxModel", "lenet", "resnet20", "export_onnx", "load_onnx_weights", "cross_entropy",
           "inference_function", "training_step"]

_EPS = 1e-5
_BN_MOMENTUM = 0.9
_STATE_SUFFIXES = (".running_mean", ".running_var")


@dataclasses.dataclass
class JaxModel:
    """A model as a pure function and its arrays.

    Attributes:
        name: ``lenet`` or ``resnet20``.
        forward: ``forward(params, state, x, batch_stats) -> (logits, new_state)``; ``x`` NCHW.
        params: the trainable parameters, ``{onnx initializer name: jax array}``.
        state: the running statistics of batch normalization, keyed the same way.
        input_shape: one sample's shape ``(C, H, W)``.
        classes: the number of outputs.
    """

    name: str
    forward: Callable
    params: dict
    state: dict
    input_shape: tuple
    classes: int

    def __call__(self, x, batch_stats: bool = False):
        """The logits of ``x`` (NCHW), not compiled (use :func:`inference_function` for speed)."""
        return self.forward(self.params, self.state, jnp.asarray(x), batch_stats)[0]


# --------------------------------------------------------------------------------------------- layers


def _conv(params, name, x, stride=1, pad=0):
    y = jax.lax.conv_general_dilated(x, params[f"{name}.weight"], (stride, stride), [(pad, pad), (pad, pad)],
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    bias = params.get(f"{name}.bias")
    return y if bias is None else y + bias[None, :, None, None]


def _dense(params, name, x):
    return x @ params[f"{name}.weight"].T + params[f"{name}.bias"]


def _maxpool(x):
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def _batchnorm(params, state, new_state, name, x, batch_stats):
    gamma, beta = params[f"{name}.weight"], params[f"{name}.bias"]
    mean, var = state[f"{name}.running_mean"], state[f"{name}.running_var"]
    if batch_stats:
        batch_mean = jnp.mean(x, axis=(0, 2, 3))
        batch_var = jnp.var(x, axis=(0, 2, 3))
        new_state[f"{name}.running_mean"] = _BN_MOMENTUM * mean + (1 - _BN_MOMENTUM) * batch_mean
        new_state[f"{name}.running_var"] = _BN_MOMENTUM * var + (1 - _BN_MOMENTUM) * batch_var
        mean, var = batch_mean, batch_var
    scale = gamma * jax.lax.rsqrt(var + _EPS)
    return x * scale[None, :, None, None] + (beta - mean * scale)[None, :, None, None]


# --------------------------------------------------------------------------------------------- models


def _lenet_forward(pad2, params, state, x, batch_stats=False):
    x = _maxpool(jax.nn.relu(_conv(params, "conv1", x, pad=2)))
    x = _maxpool(jax.nn.relu(_conv(params, "conv2", x, pad=pad2)))
    x = x.reshape(x.shape[0], -1)
    x = jax.nn.relu(_dense(params, "fc1", x))
    x = jax.nn.relu(_dense(params, "fc2", x))
    return _dense(params, "fc3", x), dict(state)


def _resnet20_forward(params, state, x, batch_stats=False):
    new_state = dict(state)

    def bn(name, y):
        return _batchnorm(params, state, new_state, name, y, batch_stats)

    x = jax.nn.relu(bn("bn1", _conv(params, "conv1", x, 1, 1)))
    cin = 16
    for stage, width in enumerate((16, 32, 64)):
        for i in range(3):
            stride = 2 if stage > 0 and i == 0 else 1
            p = f"layer{stage + 1}.{i}"
            out = jax.nn.relu(bn(f"{p}.bn1", _conv(params, f"{p}.conv1", x, stride, 1)))
            out = bn(f"{p}.bn2", _conv(params, f"{p}.conv2", out, 1, 1))
            if stride != 1 or cin != width:
                x = bn(f"{p}.shortcut_bn", _conv(params, f"{p}.shortcut", x, stride, 0))
            x = jax.nn.relu(out + x)
            cin = width
    x = jnp.mean(x, axis=(2, 3))
    return _dense(params, "fc", x), new_state


def _chw(input_shape, what: str) -> tuple[int, int, int]:
    shape = tuple(input_shape)
    if len(shape) != 3 or not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape):
        raise UserError(f"{what}: input_shape is one sample's shape, channels first: (C, H, W), three positive "
                        f"integers. Received: input_shape={input_shape!r}")
    return tuple(int(d) for d in shape)


def _network(name: str, classes: int, shape, seed: int, batch_size=None):
    from deep500lite.networks import create_model

    if name == "lenet":
        return create_model("lenet", batch_size, classes=classes, shape=shape, seed=seed)[0]
    return create_model("resnet", batch_size, classes=classes, shape=shape, seed=seed, depth=20)[0]


def _split(arrays: dict) -> tuple[dict, dict]:
    params = {k: jnp.asarray(v) for k, v in arrays.items() if not k.endswith(_STATE_SUFFIXES)}
    state = {k: jnp.asarray(v) for k, v in arrays.items() if k.endswith(_STATE_SUFFIXES)}
    return params, state


def _initializers(proto: onnx.ModelProto) -> dict:
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}


def lenet(classes: int = 10, input_shape=(1, 28, 28), seed: int = 0) -> JaxModel:
    """LeNet-5 for square inputs, with the initial weights of deep500lite's ``lenet`` network.

    Args:
        classes: the number of outputs.
        input_shape: one sample's shape, channels first ``(C, H, W)`` with ``H == W``; inputs
            smaller than 16 pixels keep their size through the second convolution.
        seed: the weights are those of ``create_model("lenet", ..., seed=seed)``.

    Returns:
        The :class:`JaxModel`.

    Raises:
        UserError: ``input_shape`` is not ``(C, H, H)``.
    """
    shape = _chw(input_shape, "lenet")
    if shape[1] != shape[2]:
        raise UserError(f"lenet takes square inputs (H == W) in input_shape=(C, H, W). "
                        f"Received: input_shape={tuple(input_shape)!r}")
    pad2 = 0 if shape[1] // 2 >= 8 else 2
    params, state = _split(_initializers(_network("lenet", classes, shape, seed).to_onnx()))
    return JaxModel("lenet", functools.partial(_lenet_forward, pad2), params, state, shape, int(classes))


def resnet20(classes: int = 10, input_shape=(3, 32, 32), seed: int = 0) -> JaxModel:
    """CIFAR ResNet-20 (projection shortcuts), with the initial weights of deep500lite's ``resnet``
    network of depth 20.

    Args:
        classes: the number of outputs.
        input_shape: one sample's shape, channels first ``(C, H, W)``, at least 4x4 pixels.
        seed: the weights are those of ``create_model("resnet", ..., depth=20, seed=seed)``.

    Returns:
        The :class:`JaxModel`.
    """
    shape = _chw(input_shape, "resnet20")
    params, state = _split(_initializers(_network("resnet20", classes, shape, seed).to_onnx()))
    return JaxModel("resnet20", _resnet20_forward, params, state, shape, int(classes))


def export_onnx(model: JaxModel, batch_size: int | None = None) -> onnx.ModelProto:
    """The model as ONNX: deep500lite's graph of the architecture holding ``model``'s weights.

    The graph's input is ``input`` (NCHW), its output ``output`` (the logits).

    Args:
        model: from :func:`lenet` or :func:`resnet20`.
        batch_size: a fixed batch size, or None for a symbolic one.

    Returns:
        The ONNX model.
    """
    if not isinstance(model, JaxModel):
        raise UserError(f"export_onnx takes a JaxModel from lenet() or resnet20(). Received: {type(model).__name__}")
    proto = _network(model.name, model.classes, model.input_shape, 0, batch_size).to_onnx()
    values = {**model.params, **model.state}
    for tensor in proto.graph.initializer:
        if tensor.name in values:
            tensor.CopyFrom(numpy_helper.from_array(np.asarray(values[tensor.name], np.float32), tensor.name))
    return proto


def load_onnx_weights(model: JaxModel, network) -> JaxModel:
    """``model`` with the weights of an ONNX graph of the same architecture.

    Args:
        model: from :func:`lenet` or :func:`resnet20`.
        network: a :class:`~deep500lite.lv1.network.Network` (its current values, e.g. an
            executor's after training) or an ``onnx.ModelProto``, with deep500lite's initializer names.

    Returns:
        A new :class:`JaxModel` holding the graph's values.

    Raises:
        UserError: a parameter of the model is missing from the graph or has another shape.
    """
    if isinstance(network, onnx.ModelProto):
        values = _initializers(network)
    else:
        names = list(network.initializers)
        values = {k: np.asarray(v) for k, v in zip(names, network.fetch_tensors(names))}
    new = {}
    for name, old in {**model.params, **model.state}.items():
        if name not in values or tuple(np.shape(values[name])) != tuple(old.shape):
            got = None if name not in values else list(np.shape(values[name]))
            raise UserError(f"load_onnx_weights: the graph must hold {name!r} shaped {list(old.shape)} for "
                            f"{model.name}. Received: {got}")
        new[name] = values[name].astype(np.float32)
    params, state = _split(new)
    return dataclasses.replace(model, params=params, state=state)


# --------------------------------------------------------------------------------------------- steps


def cross_entropy(logits, labels):
    """Mean softmax cross-entropy of ``logits`` ``(N, classes)`` and integer ``labels`` ``(N,)``."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def inference_function(model: JaxModel) -> Callable:
    """``jax.jit`` of the model's inference: ``f(x) -> logits`` (a jax array), weights closed over
    as device arrays (``x`` NCHW)."""
    params, state, forward = model.params, model.state, model.forward

    @jax.jit
    def infer(params, state, x):
        return forward(params, state, x, False)[0]

    return lambda x: infer(params, state, x)


def training_step(model: JaxModel, learning_rate: float = 0.01, momentum: float = 0.9, batch_stats: bool = True):
    """One compiled training step, as one writes it in plain JAX with optax.

    ``jax.jit`` of ``jax.value_and_grad`` of the mean softmax cross-entropy and an
    ``optax.sgd(learning_rate, momentum)`` update (``v <- momentum v + g``, ``w <- w - lr v``: the
    same as deep500lite's ``MomentumOptimizer`` at a constant rate), parameters, optimizer
    state and batch-norm state donated to the step.

    Args:
        model: the model; its arrays are the starting point.
        learning_rate: the step size.
        momentum: the momentum coefficient.
        batch_stats: batch normalization with the batch's statistics (see the module doc), as
            deep500lite's executors train.

    Returns:
        ``(step, carry)``: ``step(carry, x, y) -> (carry, loss)`` with ``carry`` the tuple
        ``(params, opt_state, state)``.
    """
    tx = optax.sgd(learning_rate, momentum)
    forward = model.forward

    def loss_fn(params, state, x, y):
        logits, new_state = forward(params, state, x, batch_stats)
        return cross_entropy(logits, y), new_state

    @functools.partial(jax.jit, donate_argnums=(0,))
    def step(carry, x, y):
        params, opt_state, state = carry
        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, new_state), loss

    # copies: donation invalidates the buffers handed to the step, the model keeps its own
    params = jax.tree_util.tree_map(jnp.copy, model.params)
    state = jax.tree_util.tree_map(jnp.copy, model.state)
    return step, (params, tx.init(params), state)
