"""deep500lite executors as ONNX backends (``onnx.backend.base.Backend``).

``backend_for("torch")`` returns a Backend class, so any tool written for ONNX backends —
``onnx.backend.test.BackendTest`` among them — can drive a deep500lite executor::

    from deep500lite.lv1.backend import backend_for
    outputs = backend_for("onnxruntime").run_model(model, [x])
"""

from __future__ import annotations

import onnx
from onnx.backend.base import Backend, BackendRep

from deep500lite.lv1.device import as_device
from deep500lite.lv1.network import load_model

__all__ = ["Deep500Backend", "Deep500BackendRep", "backend_for"]


def _device(device: str):
    text = str(device).strip().lower()
    return as_device("gpu" + text[4:] if text.startswith("cuda") else text)


class Deep500BackendRep(BackendRep):
    """A prepared model: an executor and the order of its inputs and outputs."""

    def __init__(self, executor):
        self.executor = executor

    def run(self, inputs, **kwargs):
        """Run with a list of arrays (graph input order) or a dict; returns outputs in graph order."""
        names = self.executor.network.inputs
        feeds = dict(inputs) if isinstance(inputs, dict) else dict(zip(names, inputs))
        out = self.executor.inference(feeds)
        return tuple(out[name] for name in self.executor.network.outputs)


class Deep500Backend(Backend):
    """Base of the per-framework backends; ``framework`` names the executor."""

    framework = "reference"

    @classmethod
    def _module(cls):
        from deep500lite.registry import import_framework

        return import_framework(cls.framework)

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> bool:
        """Whether the executor declares support for every operator of the model."""
        from deep500lite.errors import UnsupportedOperatorError

        try:
            cls._module().executor_class.check_supported(load_model(model, check=False))
        except UnsupportedOperatorError:
            return False
        return True

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> Deep500BackendRep:
        """Build the executor for ``model`` on ``device`` (``"CPU"`` or ``"CUDA[:N]"``)."""
        from deep500lite.registry import executor

        # ONNX's test runner passes its per-test tolerances here; they are not executor options.
        kwargs = {k: v for k, v in kwargs.items() if k not in ("rtol", "atol")}
        return Deep500BackendRep(executor(load_model(model), cls.framework, device=_device(device), **kwargs))

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        """Prepare and run in one call."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        """Not used: node tests run through :meth:`prepare` on their single-node models."""
        raise NotImplementedError(f"{cls.__name__} runs models; wrap the node in a graph.")

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Whether the executor can run on ``device`` on this machine."""
        try:
            dev = _device(device)
        except ValueError:
            return False
        return cls._module().executor_class.supports_device(dev)


def backend_for(framework: str) -> type[Deep500Backend]:
    """The ONNX Backend class running models on ``framework``."""
    from deep500lite.registry import canonical_framework

    key = canonical_framework(framework)
    return type(f"{key.capitalize()}Deep500Backend", (Deep500Backend,), {"framework": key})
