"""Native PyTorch models: a ``torch.nn.Module`` behind the GraphExecutor interface.

Use it for models that exist only in PyTorch (no ONNX file), so they can be timed and trained
like any converted network::

    ex = TorchNativeExecutor(model, input_names=["x"], output_names=["logits"],
                             loss_fn=torch.nn.functional.cross_entropy, label_name="label")
    out = ex.inference({"x": x})                                # {"logits": ...}
    out = ex.inference_and_backprop({"x": x, "label": y})       # {"logits": ..., "loss": ...}
    w_grad, = ex.network.fetch_tensors(["fc.weight_grad"])

API:

- ``TorchNativeExecutor(module, input_names=("input",), output_names=("output",), loss_fn=None,
  label_name="label", device=None)``. The module is moved to ``device`` once. Its inputs are
  the feeds named ``input_names``, passed positionally in that order. Its result (a tensor, a
  tuple/list, or a dict) is named by ``output_names`` (for a dict: the keys to return).
- With ``loss_fn(first_output, label) -> scalar``, the feed ``label_name`` is an extra network
  input and the outputs include ``"loss"``. ``inference`` computes the loss only when the label
  is fed; ``inference_and_backprop`` needs it.
- ``inference(feeds)`` runs under ``torch.inference_mode()``; ``inference_and_backprop(feeds,
  y="loss")`` runs with autograd, backpropagates from output ``y`` and stores the gradient of
  every parameter that requires one under ``"<param>_grad"`` (see ``network.gradient(y)``).
- ``executor.network`` is a :class:`NativeNetwork`: ``inputs``, ``outputs``, ``parameters``
  (the names of ``module.named_parameters()``), ``fetch_tensors``/``feed_tensor`` for parameters
  and gradients, ``gradient(y)``.
- The executor never calls ``module.train()``/``module.eval()``: set the mode you want to time.
- Feeds and outputs are numpy arrays; outputs are copies the module does not hold.
- ``loss_name`` names the loss output (default ``"loss"``); ``executor.network.input_descriptors()``
  gives ``None`` for every feed (a module declares no shapes), as the trainer reads them.

:class:`PyTorchNativeGraphExecutor` is Deep500's form: ``(module, loss, input_node_name='0',
output_node_name='output', label_node_name='label', loss_node_name='loss', events=[],
device=None, with_outputs=False)`` with a loss *module*, ``.innode``/``.outnode``/``.labelnode``/
``.lossnode``/``.model``, evaluation mode for ``inference`` and training mode for
``inference_and_backprop``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from deep500lite.errors import DeviceError, FeedError, UserError, UserKeyError, UserTypeError
from deep500lite.lv1.device import as_device
from deep500lite.lv1.executor import GraphExecutor
from deep500lite.lv1.network import Deep500NetworkNames, gradient_name
from deep500lite.frameworks.torch.executor import TorchExecutor, torch_device
from deep500lite.frameworks.torch.dtypes import to_numpy, to_torch

__all__ = ["TorchNativeExecutor", "NativeNetwork", "PyTorchNativeGraphExecutor"]


def _names(value, what: str) -> list[str]:
    names = [value] if isinstance(value, str) else list(value)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise UserTypeError(f"{what} must be a name or a non-empty list of names. Received: {value!r}")
    return names


class NativeNetwork(Deep500NetworkNames):
    """The Network-like view of a :class:`TorchNativeExecutor`'s module.

    Attributes:
        inputs: names of the feeds (the module's inputs, then the label if there is a loss).
        outputs: names of the outputs (the module's, then ``"loss"`` if there is a loss).
        parameters: names of the module's parameters (``module.named_parameters()``).
        version: always 0 (the structure never changes).
    """

    version = 0

    def __init__(self, executor: "TorchNativeExecutor"):
        self._executor = executor

    @property
    def executor(self) -> "TorchNativeExecutor":
        """The executor this view belongs to."""
        return self._executor

    @property
    def inputs(self) -> list[str]:
        ex = self._executor
        return ex.input_names + ([ex.label_name] if ex.loss_fn is not None else [])

    @property
    def outputs(self) -> list[str]:
        ex = self._executor
        return ex.output_names + ([ex.loss_name] if ex.loss_fn is not None else [])

    def input_descriptors(self) -> dict[str, None]:
        """Every input with descriptor ``None``: a module declares no input dtypes or shapes."""
        return {name: None for name in self.inputs}

    def output_descriptors(self) -> dict[str, None]:
        """Every output with descriptor ``None`` (known only once the module has run)."""
        return {name: None for name in self.outputs}

    @property
    def parameters(self) -> list[str]:
        return list(self._executor._params)

    def gradient(self, y: str = "loss") -> list[tuple[str, str]]:
        """``(parameter, gradient name)`` pairs of every parameter that requires a gradient."""
        y = self._executor._loss_output(y)
        if y not in self.outputs:
            raise UserError(f"gradient: '{y}' is not an output. Outputs: {self.outputs}. Received: y={y!r}")
        return [(n, gradient_name(n)) for n, p in self._executor._params.items() if p.requires_grad]

    def fetch_tensors(self, names: Sequence[str]) -> list[np.ndarray]:
        """Copies of the named parameters or gradients.

        Raises:
            UserKeyError: a name that is neither a parameter nor a computed gradient (a ``KeyError``).
            UserTypeError: ``names`` is one string, not a list of them.
        """
        if isinstance(names, str):
            raise UserTypeError(f"fetch_tensors expects a list of names (wrap one name as [name]). "
                                f"Received: the string {names!r}")
        return [self._executor.fetch_tensor(n) for n in names]

    def fetch_tensor(self, name: str) -> np.ndarray:
        """A copy of one parameter or gradient."""
        return self._executor.fetch_tensor(name)

    def feed_tensor(self, name: str, value, is_param: bool = False) -> None:
        """Overwrite a parameter in place (same shape and dtype)."""
        self._executor.feed_tensor(name, value)

    def __repr__(self) -> str:
        return (f"NativeNetwork(module={type(self._executor.module).__name__}, inputs={self.inputs}, "
                f"outputs={self.outputs}, parameters={len(self.parameters)})")


class TorchNativeExecutor(GraphExecutor):
    """Runs a ``torch.nn.Module`` directly (see the module docstring for the API).

    Args:
        module: the model.
        input_names: names of the module's positional inputs.
        output_names: names of its outputs (or the keys to take from a returned dict).
        loss_fn: ``loss_fn(first_output, label) -> scalar tensor``, or ``None``.
        label_name: the feed holding the label when there is a loss.
        loss_name: the output holding the loss (default ``"loss"``).
        device: ``None``/``"cpu"``, ``"gpu:N"`` or a Device.

    Raises:
        DeviceError: the device is not available.
        UserTypeError: ``module`` is not an ``nn.Module`` or a name list is malformed (a ``TypeError``).
        UserError: the label or the loss output clashes with an input or output name.
    """

    framework = "torch"
    device_peak_memory = TorchExecutor.device_peak_memory  # the same GPU peak as the converting executor

    def __init__(self, module: torch.nn.Module, input_names=("input",), output_names=("output",),
                 loss_fn: Callable | None = None, label_name: str = "label", device=None, loss_name: str = "loss"):
        # No ONNX Network here, so GraphExecutor.__init__ (load_model) is not called.
        if not isinstance(module, torch.nn.Module):
            raise UserTypeError(f"TorchNativeExecutor wraps a torch.nn.Module. Received: {type(module).__name__}")
        dev = as_device(device)
        if not TorchExecutor.supports_device(dev):
            raise DeviceError(f"The torch executor cannot run on {dev}: "
                              + TorchExecutor.device_unavailable_reason(dev) + f" Received: device={str(dev)!r}")
        self.devname = dev
        self._device = torch_device(dev)
        self.module = module.to(self._device)
        self.input_names = _names(input_names, "input_names")
        self.output_names = _names(output_names, "output_names")
        self.loss_fn = loss_fn
        self.label_name = label_name
        self.loss_name = loss_name
        if loss_fn is not None and (label_name in self.input_names or loss_name in self.output_names):
            raise UserError(f"label_name and the loss output must not clash with input_names or output_names; "
                            f"choose other names. Received: label_name={label_name!r}, loss_name={loss_name!r}, "
                            f"input_names={self.input_names}, output_names={self.output_names}")
        self._params = dict(self.module.named_parameters())
        self._grads: dict[str, torch.Tensor] = {}
        self.network = NativeNetwork(self)

    @classmethod
    def supports_device(cls, device) -> bool:
        """As :meth:`TorchExecutor.supports_device`."""
        return TorchExecutor.supports_device(device)

    @classmethod
    def device_unavailable_reason(cls, device) -> str:
        """As :meth:`TorchExecutor.device_unavailable_reason`."""
        return TorchExecutor.device_unavailable_reason(device)

    def synchronize(self) -> None:
        """Wait for the GPU's queued work (no-op on the CPU)."""
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)

    def _network_changed(self) -> None:
        """A native module has no ONNX structure to rebuild."""

    # ------------------------------------------------------------- running
    def _tensors_from(self, feeds, need_label: bool):
        if not isinstance(feeds, dict):
            raise FeedError(f"Feeds must be a dict of input name to array. Received: {type(feeds).__name__}")
        allowed = self.network.inputs
        unknown = [k for k in feeds if k not in allowed]
        missing = [k for k in self.input_names if k not in feeds]
        if need_label and self.label_name not in feeds:
            missing.append(self.label_name)
        if unknown:
            raise FeedError(f"Unknown input(s) {unknown}. The module's inputs are {allowed}. "
                            f"Received: feeds {list(feeds)}")
        if missing:
            raise FeedError(f"Missing input(s) {missing}. The module's inputs are {allowed}. "
                            f"Received: feeds {list(feeds)}")
        xs = [to_torch(np.asarray(feeds[n]), self._device) for n in self.input_names]
        label = feeds.get(self.label_name) if self.loss_fn is not None else None
        return xs, None if label is None else to_torch(np.asarray(label), self._device)

    def _forward(self, xs, label) -> dict[str, torch.Tensor]:
        result = self.module(*xs)
        if isinstance(result, torch.Tensor):
            values = [result]
        elif isinstance(result, dict):
            values = [result[k] for k in self.output_names]
        else:
            values = list(result)
        if len(values) < len(self.output_names):
            raise UserError(f"The module returned {len(values)} output(s); output_names names "
                            f"{len(self.output_names)}: {self.output_names}. The module must return at least "
                            f"one output per name. Received: {len(values)} output(s)")
        outs = dict(zip(self.output_names, values))
        if label is not None:
            outs[self.loss_name] = self.loss_fn(values[0], label)
        return outs

    def _loss_output(self, y: str) -> str:
        """``y``, where the default name ``"loss"`` means this executor's loss output."""
        return self.loss_name if y == "loss" and self.loss_fn is not None else y

    def inference(self, feeds):
        """Call the module on the feeds (see :meth:`GraphExecutor.inference`)."""
        xs, label = self._tensors_from(feeds, need_label=False)
        with torch.inference_mode():
            outs = self._forward(xs, label)
        return {k: to_numpy(v, copy=True) for k, v in outs.items()}

    def inference_and_backprop(self, feeds, y="loss"):
        """Forward with autograd, then backward from the scalar output ``y``.

        Afterwards ``network.fetch_tensors(["<param>_grad"])`` returns the gradients.
        """
        y = self._loss_output(y)
        xs, label = self._tensors_from(feeds, need_label=(y == self.loss_name))
        for p in self._params.values():
            p.grad = None
        outs = self._forward(xs, label)
        if y not in outs:
            raise FeedError(f"inference_and_backprop: '{y}' is not an output. Outputs: {list(outs)}. "
                            f"Received: y={y!r}")
        target = outs[y]
        if target.numel() != 1:
            raise FeedError(f"inference_and_backprop: '{y}' must be a scalar. "
                            f"Received: shape {list(target.shape)}")
        target.reshape(()).backward()
        self._grads = {gradient_name(n): p.grad for n, p in self._params.items() if p.grad is not None}
        return {k: to_numpy(v, copy=True) for k, v in outs.items()}

    # --------------------------------------------------------------- tensors
    def has_tensor(self, name):
        return name in self._params or name in self._grads

    def fetch_tensor(self, name):
        if name in self._params:
            return to_numpy(self._params[name], copy=True)
        if name in self._grads:
            return to_numpy(self._grads[name], copy=True)
        raise UserKeyError(f"No tensor '{name}'. Parameters: {list(self._params)[:20]}; gradients "
                           f"('<param>_grad') exist after inference_and_backprop. Received: {name!r}")

    def feed_tensor(self, name, value):
        if name not in self._params:
            raise UserKeyError(f"feed_tensor: no parameter '{name}'. Parameters: {list(self._params)[:20]}. "
                               f"Received: {name!r}")
        p = self._params[name]
        value = np.asarray(value)
        new = to_torch(value, torch.device("cpu"))
        if tuple(new.shape) != tuple(p.shape) or new.dtype != p.dtype:
            raise FeedError(f"feed_tensor('{name}'): expected {p.dtype}{list(p.shape)}. "
                            f"Received: {value.dtype.name}{list(value.shape)}")
        with torch.no_grad():
            p.copy_(new)

    def __repr__(self) -> str:
        return f"TorchNativeExecutor(device={self.devname}, network={self.network!r})"


def _deep500_loss(loss: torch.nn.Module) -> Callable:
    """``loss(output, label)`` with the label as the loss expects it: class indices as int64, else the output's dtype."""
    def loss_fn(output, label):
        if label.dtype.is_floating_point or label.dtype.is_complex:
            return loss(output, label.to(output.dtype))
        return loss(output, label.long())
    return loss_fn


class PyTorchNativeGraphExecutor(TorchNativeExecutor):
    """Deep500's executor of a ``torch.nn.Module`` with a loss module, in Deep500's signature.

    A :class:`TorchNativeExecutor` with one input, one output and the loss: ``inference(feeds)``
    returns ``{outnode: ..., lossnode: ...}`` (the loss when the label is fed),
    ``inference_and_backprop(feeds)`` also computes every parameter's gradient (fetched as
    ``network.fetch_tensors(["<param>_grad"])``, and returned too with ``with_outputs=True``).
    As in Deep500, ``inference`` puts the module in evaluation mode and
    ``inference_and_backprop`` in training mode, and events (objects with
    ``before_executor(feeds)``, ``after_inference(outputs)``, ``after_backprop(outputs)``) are
    called around each run.

    Args:
        module: the model.
        loss: a loss module called as ``loss(output, label)``; integer labels are passed as int64
            class indices, floating labels in the output's dtype. ``None``: no loss.
        input_node_name: the feed holding the module's input (Deep500's default ``'0'``).
        output_node_name: the output's name.
        label_node_name: the feed holding the label.
        loss_node_name: the output holding the loss.
        events: executor events.
        device: ``None``/``d5.CPUDevice()`` (the CPU), ``d5.GPUDevice()``, or ``"gpu:N"``.
        with_outputs: also return the gradients from ``inference_and_backprop``.

    Attributes:
        innode, outnode, labelnode, lossnode: the names above.
        model: the module (on the device). loss: the loss module. events: the events.
    """

    def __init__(self, module: torch.nn.Module, loss: torch.nn.Module | None, input_node_name: str = "0",
                 output_node_name: str = "output", label_node_name: str = "label", loss_node_name: str = "loss",
                 events: Sequence | None = None, device=None, with_outputs: bool = False):
        super().__init__(module, input_names=[input_node_name], output_names=[output_node_name],
                         loss_fn=None if loss is None else _deep500_loss(loss), label_name=label_node_name,
                         device=device, loss_name=loss_node_name)
        self.model = self.module
        self.loss = loss.to(self._device) if isinstance(loss, torch.nn.Module) else loss
        self.innode, self.outnode = input_node_name, output_node_name
        self.labelnode, self.lossnode = label_node_name, loss_node_name
        self.events = list(events or [])
        self.with_outputs = with_outputs
        self.is_training = self.module.training

    def _mode(self, training: bool) -> None:
        if self.is_training != training:
            self.module.train(training)
            self.is_training = training

    def _feeds(self, feeds):
        """Deep500 read its input and label from the feeds and ignored any other key."""
        if not isinstance(feeds, dict):
            raise FeedError(f"Feeds must be a dict of input name to array. Received: {type(feeds).__name__}")
        return {k: v for k, v in feeds.items() if k in self.network.inputs}

    def inference(self, feeds):
        """Evaluation-mode forward pass (and the loss when the label is fed)."""
        for event in self.events:
            event.before_executor(feeds)
        self._mode(False)
        outputs = super().inference(self._feeds(feeds))
        for event in self.events:
            event.after_inference(outputs)
        return outputs

    def inference_and_backprop(self, feeds, y="loss"):
        """Training-mode forward pass, loss and backward pass; the gradients stay for the optimizer."""
        for event in self.events:
            event.before_executor(feeds)
        self._mode(True)
        outputs = super().inference_and_backprop(self._feeds(feeds), y)
        if self.with_outputs:
            outputs.update({name: to_numpy(g, copy=True) for name, g in self._grads.items()})
        for event in self.events:
            event.after_backprop(outputs)
        return outputs

    def __repr__(self) -> str:
        return f"PyTorchNativeGraphExecutor(device={self.devname}, network={self.network!r})"
