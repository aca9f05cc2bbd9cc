"""Level 1: the graph-executor interface shared by every framework."""

from __future__ import annotations

import abc
from typing import ClassVar

import numpy as np

from deep500lite.errors import DeviceError, ModelError, UnsupportedOperatorError, UserError, UserKeyError
from deep500lite.lv0.custom import lookup_custom_op
from deep500lite.lv1.device import Device, as_device
from deep500lite.lv1.model_checks import newest_opset
from deep500lite.lv1.network import Network, iter_nodes, load_model

__all__ = ["GraphExecutor"]


class GraphExecutor(abc.ABC):
    """Runs a :class:`~deep500lite.Network` on one framework and device.

    Subclasses set :attr:`framework` and :attr:`SUPPORTED_OPS` and implement :meth:`inference`
    and :meth:`inference_and_backprop`. Parameters stay on the executor's device between calls;
    every array crossing the API is a numpy array.

    Args:
        network: a Network, a path to an ONNX file or an ``onnx.ModelProto``. A Network already
            attached to another executor is copied with the values it was built or loaded with (not
            what that executor trained since), so each executor owns its own values and starts from
            the same weights.
        device: ``None``/``"cpu"``, ``"gpu:N"`` or a :class:`~deep500lite.Device`.

    Attributes:
        network: the network this executor runs and whose tensors it holds.
        devname: the device.
        compile_seconds: cumulative wall-clock seconds this executor has spent compiling so far
            (tracing, XLA or inductor compilation, building an ONNX Runtime session), measured
            where it happens; 0.0 when nothing was compiled. Timers subtract its increase during
            a step from the step's time.
        options: the options this executor was built with that change how it runs (a
            JSON-serializable dict, such as ``{"compile": True, "compile_mode": "default"}``);
            empty by default. Results files record it.
    """

    framework: ClassVar[str] = ""
    SUPPORTED_OPS: ClassVar[frozenset] = frozenset()
    #: Cumulative seconds spent compiling (see the class docs); executors that compile add to it.
    compile_seconds: float = 0.0

    @property
    def options(self) -> dict:
        """The options that change how this executor runs (a fresh empty dict per instance by default)."""
        found = self.__dict__.get("_executor_options")
        if found is None:
            found = self.__dict__["_executor_options"] = {}
        return found

    @options.setter
    def options(self, value: dict) -> None:
        self.__dict__["_executor_options"] = dict(value)

    def __init__(self, network, device=None):
        device = as_device(device)
        if not self.supports_device(device):
            raise DeviceError(
                f"The {self.framework} executor cannot run on {device}: "
                + self.device_unavailable_reason(device) + f" Received: device={str(device)!r}"
            )
        self.devname: Device = device
        network = load_model(network)
        # Checked before attaching, so a refused network stays usable with another executor.
        self.check_opset(network)
        self.check_supported(network)
        self.network: Network = network._attach(self)

    # ------------------------------------------------------------- compiling ahead
    def is_compiled(self) -> bool:
        """Whether this executor compiles its functions on first use (``torch.compile``, XLA, ``jax.jit``).

        Default False; a compiled executor returns True, and :meth:`precompile` then compiles ahead.
        """
        return False

    def _random_state(self):
        """The state of the random generators training draws from (Dropout masks), to restore later; None: none."""
        return None

    def _restore_random_state(self, state) -> None:
        """Put back a state from :meth:`_random_state`."""

    def precompile(self, feeds: dict, y: str = "loss", inference_feeds: dict | None = None) -> float:
        """Compile what training (and inference) on feeds of these shapes needs, before any of it runs.

        MLPerf counts compilation as initialization, before ``run_start``. This runs one
        :meth:`inference_and_backprop` with ``feeds`` and one :meth:`inference` with
        ``inference_feeds`` (default ``feeds`` without ``y``'s label), which compiles them, then
        puts back every floating-point initializer that changed (parameters are not changed by
        these calls; BatchNormalization's running statistics are) and the random generators'
        state, so training afterwards computes exactly what it would have without this call.
        An executor that does not compile (:meth:`is_compiled` false) does nothing.

        Args:
            feeds: one array per network input, shaped like a training batch.
            y: the loss.
            inference_feeds: feeds shaped like an evaluation batch (default ``feeds``).

        Returns:
            The seconds compiled (the increase of :attr:`compile_seconds`).
        """
        if not self.is_compiled():
            return 0.0
        before = float(self.compile_seconds or 0.0)
        net = self.network
        names = net.parameters
        saved = net.fetch_tensors(names)
        state = self._random_state()
        try:
            self.inference_and_backprop(feeds, y)
            self.inference(inference_feeds if inference_feeds is not None else feeds)
        finally:
            for name, old, new in zip(names, saved, net.fetch_tensors(names)):
                if not np.array_equal(old, new, equal_nan=True):
                    net.feed_tensor(name, old)
            self._restore_random_state(state)
        return float(self.compile_seconds or 0.0) - before

    # ----------------------------------------------------------------- contract
    @abc.abstractmethod
    def inference(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the network forward.

        Args:
            feeds: one numpy array per network input (see ``network.inputs``); dtypes and shapes
                must match the declared ones.

        Returns:
            A dict from each network output name to a numpy array.

        Raises:
            FeedError: the feeds do not match the network's inputs.
        """

    @abc.abstractmethod
    def inference_and_backprop(self, feeds: dict[str, np.ndarray], y: str = "loss") -> dict[str, np.ndarray]:
        """Run forward, then backward from the scalar ``y``.

        Args:
            feeds: as in :meth:`inference`.
            y: the name of a scalar tensor (the loss).

        Returns:
            The outputs, as in :meth:`inference`. Afterwards every parameter gradient listed by
            ``network.gradient(y)`` can be read with ``network.fetch_tensors``.
        """

    # ------------------------------------------------------- optional abilities
    def backprop(self, feeds: dict[str, np.ndarray], output_grads: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Forward, then backward from given gradients of graph outputs (a vector-Jacobian product).

        Args:
            feeds: as in :meth:`inference`.
            output_grads: graph output name -> the gradient of that output.

        Returns:
            ``"<param>_grad"`` for every parameter the outputs depend on and ``"<input>_grad"``
            for every floating-point input, as numpy arrays.

        Raises:
            UserError: this executor does not backpropagate from given output gradients (the
                default; the torch executor does).
        """
        raise UserError(f"The {self.framework or type(self).__name__} executor does not backpropagate from given "
                        f"output gradients yet; the torch executor does, and every executor backpropagates from a "
                        f"scalar with inference_and_backprop(feeds, y). Received: output_grads for "
                        f"{list(output_grads) if isinstance(output_grads, dict) else type(output_grads).__name__}")

    def set_gradient_hook(self, hook) -> bool:
        """Have ``hook`` see each parameter's gradient as soon as the backward pass has computed it.

        ``hook`` has two methods. ``hook.on_gradient(name, grad)`` is called during
        :meth:`inference_and_backprop`, once for each parameter of ``network.gradient(y)`` whose
        gradient is complete, while the backward pass goes on with the rest; ``grad`` is a numpy
        array the hook may overwrite in place, and the parameter's gradient holds what it holds
        when the backward pass ends. ``hook.on_backward_end()`` is called after the backward
        pass, before :meth:`inference_and_backprop` returns. A parameter through which no
        gradient flowed gets no ``on_gradient`` call. An error raised by the hook is raised by
        :meth:`inference_and_backprop` once the backward pass has ended. Data-parallel
        optimizers start each bucket's allreduce from ``on_gradient``.

        Args:
            hook: the object above, or None to remove the hook.

        Returns:
            True when this executor calls the hook (the torch executor); False when it cannot
            see gradients during the backward pass (this default: nothing is installed, and the
            gradients are read after :meth:`inference_and_backprop`).
        """
        return False

    @classmethod
    def supports_device(cls, device: Device) -> bool:
        """Whether this executor can run on ``device`` on this machine (default: the CPU only)."""
        return not device.is_gpu

    @classmethod
    def device_unavailable_reason(cls, device: Device) -> str:
        """A sentence saying why ``device`` cannot be used."""
        return "this executor runs on the CPU only; use device='cpu'."

    def synchronize(self) -> None:
        """Wait until all work queued on the device has finished (timers call this)."""

    def has_tensor(self, name: str) -> bool:
        """Whether the executor holds the tensor ``name`` (a parameter or gradient)."""
        return False

    def fetch_tensor(self, name: str) -> np.ndarray:
        """The value of a tensor the executor holds, copied to a numpy array.

        Raises:
            UserKeyError: the executor holds no tensor ``name`` (this default holds none).
        """
        raise UserKeyError(f"The {self.framework or type(self).__name__} executor holds no tensor '{name}'; "
                           f"has_tensor(name) says which it holds. Received: {name!r}")

    def feed_tensor(self, name: str, value: np.ndarray) -> None:
        """Set the value of a parameter the executor holds (on its device).

        Raises:
            UserKeyError: the executor holds no tensor ``name`` (this default holds none).
        """
        raise UserKeyError(f"feed_tensor: the {self.framework or type(self).__name__} executor holds no tensor "
                           f"'{name}'; has_tensor(name) says which it holds. Received: {name!r}")

    def _network_changed(self) -> None:
        """Called when operations or outputs are added to the network (rebuild what depends on it)."""
        self.check_supported(self.network)

    @classmethod
    def opset_range(cls) -> tuple[int, int]:
        """The default-domain opsets this executor runs: ``(oldest, newest)``.

        The default is every opset the installed onnx package defines: the executors convert each
        operator by the version its opset selects.
        """
        return 1, newest_opset()

    @classmethod
    def check_opset(cls, network: Network) -> None:
        """Raise :class:`ModelError` when the network's default opset is outside :meth:`opset_range`."""
        low, high = cls.opset_range()
        if not low <= network.opset <= high:
            raise ModelError(f"The {cls.framework or cls.__name__} executor runs ONNX opsets {low} to {high}; the "
                             f"model imports opset {network.opset}. Received: opset {network.opset}")

    @classmethod
    def check_supported(cls, network: Network) -> None:
        """Raise :class:`UnsupportedOperatorError` for the first operator this executor lacks."""
        if not cls.SUPPORTED_OPS:
            return
        for node in iter_nodes(network.graph):
            if node.domain not in ("", "ai.onnx"):
                # The registration is checked first, so an unregistered op gets the same message everywhere.
                lookup_custom_op(node.op_type, node.domain, node.name or node.output[0])
                if not cls.supports_custom_domain(node.domain):
                    raise UnsupportedOperatorError(
                        f"The {cls.framework} executor does not support operator "
                        f"'{node.domain}::{node.op_type}' (node '{node.name or node.output[0]}'): "
                        f"{cls.custom_domain_reason(node.domain)} Received: domain={node.domain!r}"
                    )
                continue
            if node.op_type not in cls.SUPPORTED_OPS:
                from deep500lite.registry import executors_supporting

                others = executors_supporting(node.op_type)
                raise UnsupportedOperatorError(
                    f"The {cls.framework} executor does not support operator '{node.op_type}' "
                    f"(node '{node.name or node.output[0]}'). Executors that support it: {others}. "
                    f"Received: op_type={node.op_type!r}"
                )

    @classmethod
    def supports_custom_domain(cls, domain: str) -> bool:
        """Whether nodes of a custom (non-ONNX) domain can run here (default: no).

        Executors that run registered custom operators (:func:`d5.register_op`) say yes; the
        node's op type must then be registered.
        """
        return False

    @classmethod
    def custom_domain_reason(cls, domain: str) -> str:
        """Why nodes of ``domain`` cannot run on this executor."""
        return "this executor runs no custom-domain operators."

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.devname}, network={self.network!r})"

    def device_peak_memory(self, reset: bool = False) -> int | None:
        """The peak memory allocated on the executor's accelerator, in bytes.

        Executors that can read it (torch and TensorFlow on a GPU) override this;
        :class:`~deep500lite.metrics.training.PeakMemory` calls it.

        Args:
            reset: start a new peak now instead of reading it (then returns None).

        Returns:
            Bytes since the last reset (or since the device was first used), or None on the CPU,
            after a reset, or when the framework cannot tell (the default).
        """
        return None
