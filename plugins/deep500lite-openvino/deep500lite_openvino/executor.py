"""The OpenVINO executor: an ONNX graph read by OpenVINO's ONNX frontend and compiled for the CPU.

See the package docstring for what is compiled when. OpenVINO reuses its output buffers between
calls, so every output is copied into a numpy array the caller owns.
"""

from __future__ import annotations

import copy
import functools
import re

import numpy as np
import onnx
import openvino as ov
from onnx import numpy_helper

from deep500lite.errors import Deep500Error
from deep500lite.lv1.execution_errors import execution_error, framework_cause, shape_of
from deep500lite.lv1.host import HostGraphExecutor

from deep500lite_openvino.ops import SUPPORTED_OPS

__all__ = ["OpenVINOExecutor", "from_model", "core", "compile_onnx"]

# How OpenVINO names a node: its ONNX frontend "ONNX node '<Node(Reshape): name>'", its CPU plugin
# "[CPU] MatMul node with name 'y'" (the friendly name: the node's first output)
_FRONTEND_NODE = re.compile(r"<Node\((\w+)\): ([^>]*)>")
_CPU_NODE = re.compile(r"\[CPU\] (\w+) node with name '([^']*)'")


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


def _failure(exc: Exception, model: onnx.ModelProto, feeds: dict | None, where):
    """The :class:`~deep500lite.ExecutionError` of an OpenVINO failure, at the node its message names.

    The node's input shapes come from the feeds and initializers, and for intermediate tensors
    from a second compilation of just the nodes that compute them (run only after a failure).
    """
    text = str(exc)
    match = _FRONTEND_NODE.search(text) or _CPU_NODE.search(text)
    node = None
    if match is not None:
        op_type, name = match.groups()
        node = next((n for n in model.graph.node if n.op_type == op_type and name in (n.name, *n.output)), None)
    shapes = None
    if node is not None:
        feeds = feeds or {}
        inits = {i.name: list(i.dims) for i in model.graph.initializer}
        shapes = ["absent" if not x else shape_of(feeds[x]) if x in feeds else inits.get(x) for x in node.input]
        needed = [x for x, sh in zip(node.input, shapes) if x and sh is None]
        if needed:
            try:
                probe = copy.deepcopy(model)
                del probe.graph.output[:]
                probe.graph.output.extend(onnx.ValueInfoProto(name=x) for x in needed)
                request = compile_onnx(probe).create_infer_request()
                names = {n for port in request.model_inputs for n in port.get_names()}
                values = request.infer({k: v for k, v in feeds.items() if k in names}, share_outputs=False)
                found = {x: shape_of(np.asarray(values[i])) for i, x in enumerate(needed)}
                shapes = [found.get(x, sh) for x, sh in zip(node.input, shapes)]
            except Exception:  # noqa: BLE001 - the shapes are a help; the error stands without them
                pass
    cause = framework_cause(exc)
    cause = re.sub(r"Exception from src/\S+:\d+:\s*", "", cause).strip()
    return execution_error("openvino", cause, node, shapes, where)


class _Runner:
    """``run(names, feeds) -> list of arrays`` over one compiled model, errors turned into deep500lite's."""

    def __init__(self, compiled: ov.CompiledModel, model: onnx.ModelProto, where):
        self.compiled, self.model, self.where = compiled, model, where
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
            error = _failure(exc, self.model, feeds, self.where)
        raise error  # outside the except block: the error keeps no frame of the failed run alive


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
        self._pending_feeds = None  # the feeds of the call that compiles, for a failure's input shapes
        self._forward = None
        self._forward_version = None

    def _compile(self, model, where="training graph"):
        if where == "training graph":  # compiled when the first feeds come, with their shapes
            return _StaticRunner(model, self.threads, where)
        try:
            compiled = compile_onnx(model, self.threads)
        except Deep500Error:
            raise
        except Exception as exc:  # noqa: BLE001 - the frontend or the CPU plugin refusing the graph
            error = _failure(exc, model, self._pending_feeds, where)
        else:
            return _Runner(compiled, model, where)
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
        self._pending_feeds = feeds
        try:
            runner = self._forward_runner()
        finally:
            self._pending_feeds = None
        # an initializer the model also declares as a graph input stays an input: fed like the others
        fixed = {k: self._tensors[k] for k in self.network.initializers if k in runner.inputs}
        return dict(zip(outputs, runner(outputs, {**fixed, **feeds} if fixed else feeds)))


class _StaticRunner:
    """A runner of the training graph compiled once per shape of its feeds, with those shapes made static.

    The autodiff's training graph computes shapes and reduction axes at run time; OpenVINO's ONNX
    frontend cannot convert some of those with symbolic dimensions (a ReduceSum whose axes have no
    static rank), and converts all of them when the graph's inputs have the feeds' fixed shapes.
    """

    def __init__(self, model: onnx.ModelProto, threads, where):
        self.model, self.threads, self.where = model, threads, where
        self.runners: dict[tuple, _Runner] = {}

    def __call__(self, names, feeds):
        key = tuple(sorted((k, np.shape(v)) for k, v in feeds.items()))
        runner = self.runners.get(key)
        if runner is None:
            static = copy.deepcopy(self.model)
            for value in static.graph.input:
                if value.name in feeds and value.type.HasField("tensor_type"):
                    dims = value.type.tensor_type.shape.dim
                    del dims[:]
                    dims.extend(onnx.TensorShapeProto.Dimension(dim_value=int(d)) for d in np.shape(feeds[value.name]))
            try:
                compiled = compile_onnx(static, self.threads)
            except Deep500Error:
                raise
            except Exception as exc:  # noqa: BLE001 - the frontend or the CPU plugin refusing the graph
                error = _failure(exc, static, feeds, self.where)
            else:
                error = None
            if error is not None:
                raise error
            if len(self.runners) >= 4:  # a few batch sizes (the last batch of an epoch); not one per call
                self.runners.pop(next(iter(self.runners)))
            runner = self.runners[key] = _Runner(compiled, static, self.where)
        return runner(names, feeds)


def from_model(network, device=None, seed: int = 0, threads: int | None = None) -> OpenVINOExecutor:
    """Build an :class:`OpenVINOExecutor` (CPU) for a Network, ONNX file or ModelProto."""
    return OpenVINOExecutor(network, device, seed, threads)
