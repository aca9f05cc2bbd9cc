"""The OpenVINO executor: an ONNX graph read by OpenVINO's ONNX frontend and compiled for the CPU.

See the package docstring for what is compiled when. OpenVINO reuses its output buffers between
calls, so every output is copied into a numpy array the caller owns.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import onnx
import openvino as ov
from onnx import numpy_helper

from deep500lite.errors import Deep500Error
from deep500lite.lv1.execution_errors import execution_error, session_error
from deep500lite.lv1.host import HostGraphExecutor

from deep500lite_openvino.ops import SUPPORTED_OPS

__all__ = ["OpenVINOExecutor", "from_model", "core", "compile_onnx"]


@functools.lru_cache(maxsize=1)
def core() -> ov.Core:
    """The process's ``openvino.Core`` (one is enough; it caches the CPU plugin)."""
    return ov.Core()


def compile_onnx(model: onnx.ModelProto, threads: int | None = None) -> ov.CompiledModel:
    """Read an ONNX model with OpenVINO's frontend and compile it for the CPU in float32.

    Args:
        model: the ONNX model.
        threads: ``INFERENCE_NUM_THREADS`` (None: OpenVINO's default, every core it may use).
    """
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    if threads is not None:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    return core().compile_model(core().read_model(model.SerializeToString()), "CPU", config)


class _Runner:
    """``run(names, feeds) -> list of arrays`` over one compiled model, errors turned into deep500lite's."""

    def __init__(self, compiled: ov.CompiledModel, where):
        self.compiled, self.where = compiled, where
        self.request = compiled.create_infer_request()
        self.ports = {name: port for port in compiled.outputs for name in port.get_names()}
        self.inputs = {name for port in compiled.inputs for name in port.get_names()}

    def __call__(self, names, feeds):
        try:
            # share_inputs: OpenVINO reads the caller's arrays in place; share_outputs=False: copies out.
            results = self.request.infer({k: v for k, v in feeds.items() if k in self.inputs},
                                         share_inputs=True, share_outputs=False)
            return [np.asarray(results[self.ports[name]]) for name in names]
        except Deep500Error:
            raise
        except Exception as exc:  # noqa: BLE001 - an inference failure becomes an ExecutionError
            error = execution_error("openvino", exc, None, None, self.where)
        raise error


class OpenVINOExecutor(HostGraphExecutor):
    """Runs a network with OpenVINO on the CPU (see :mod:`deep500lite_openvino`).

    Args:
        network: a Network, ONNX file path or ModelProto.
        device: ``None`` or ``"cpu"`` (OpenVINO's GPU plugin is not supported here).
        seed: seed of the dropout masks of the training graph.
        threads: OpenVINO's inference threads (None: its default).
    """

    framework = "openvino"
    SUPPORTED_OPS = SUPPORTED_OPS

    def __init__(self, network, device=None, seed: int = 0, threads: int | None = None):
        super().__init__(network, device, seed)  # refuses a GPU (the default supports_device) and unknown ops
        self.threads = threads
        self._forward = None
        self._forward_version = None

    def _compile(self, model, where="training graph"):
        try:
            compiled = compile_onnx(model, self.threads)
        except Deep500Error:
            raise
        except Exception as exc:  # noqa: BLE001 - the frontend or the CPU plugin refusing the graph
            error = session_error("openvino", exc, model, where)
        else:
            return _Runner(compiled, where)
        raise error

    def _parameters_changed(self) -> None:
        self._forward = None

    def _forward_runner(self) -> _Runner:
        """The inference graph with the current parameters as constants, compiled when they changed."""
        if self._forward is None or self._forward_version != self.network.version:
            # The network holds its parameters apart from the graph; here they become constants again.
            model = copy.deepcopy(self.network._model)
            declared = {i.name for i in model.graph.input}
            model.graph.initializer.extend(numpy_helper.from_array(self._tensors[name], name)
                                           for name in self.network.initializers if name not in declared)
            self._forward = self._compile(model, where=None)
            self._forward_version = self.network.version
        return self._forward

    def inference(self, feeds):
        """Run the network forward (see :meth:`GraphExecutor.inference`)."""
        feeds = self.network.check_feeds(feeds)
        outputs = self.network.outputs
        runner = self._forward_runner()
        # an initializer the model also declares as a graph input stays an input: fed like the others
        fixed = {k: self._tensors[k] for k in self.network.initializers if k in runner.inputs}
        return dict(zip(outputs, runner(outputs, {**fixed, **feeds} if fixed else feeds)))


def from_model(network, device=None, seed: int = 0, threads: int | None = None) -> OpenVINOExecutor:
    """Build an :class:`OpenVINOExecutor` (CPU) for a Network, ONNX file or ModelProto."""
    return OpenVINOExecutor(network, device, seed, threads)
