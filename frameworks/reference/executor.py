"""The numpy reference executor."""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from deep500lite.errors import Deep500Error
from deep500lite.lv1.execution_errors import execution_error, session_error, shape_of
from deep500lite.lv1.host import HostGraphExecutor
from deep500lite.frameworks.reference.custom import op_run_classes
from deep500lite.frameworks.reference.ops import FAST_OPS, SUPPORTED_OPS

__all__ = ["ReferenceExecutor", "from_model", "from_onnx"]


class ReferenceExecutor(HostGraphExecutor):
    """Runs a network with ``onnx.reference.ReferenceEvaluator`` on numpy arrays.

    It runs every operator ``onnx.reference`` has (its kernels, and the operators ONNX defines
    as functions, expanded), with deep500lite's own numpy kernels where ``onnx.reference`` is too
    slow or wrong: ``ConvTranspose`` (the input gradient of every convolution; a per-position loop
    there, :mod:`~deep500lite.frameworks.reference.ops.conv`), ``MaxPool``/``AveragePool``
    (``ceil_mode``, ``SAME_LOWER`` and MaxPool's indices with padding are wrong there,
    :mod:`~deep500lite.frameworks.reference.ops.pool`) and ``GatherElements`` (crashes on more
    than 32 indices and on a negative axis there, :mod:`~deep500lite.frameworks.reference.ops.shape`).

    The network's parameters are held as numpy arrays and fed to the evaluator as graph inputs,
    so ``feed_tensor`` takes effect without rebuilding anything.
    """

    framework = "reference"
    SUPPORTED_OPS = SUPPORTED_OPS

    def __init__(self, network, device=None, seed: int = 0):
        super().__init__(network, device, seed)
        self._evaluator = None
        self._built_version = -1

    def _evaluator_for_network(self):
        if self._evaluator is None or self._built_version != self.network.version:
            model = copy.deepcopy(self.network._model)
            graph = model.graph
            declared = {i.name for i in graph.input}
            for name in self.network.initializers:
                if name not in declared:
                    v = self._tensors[name]
                    graph.input.append(onnx.helper.make_tensor_value_info(
                        name, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
            self._evaluator = self._compile(model, where=None)
            self._built_version = self.network.version
        return self._evaluator

    def inference(self, feeds):
        """Run the network forward (see :meth:`GraphExecutor.inference`)."""
        feeds = self.network.check_feeds(feeds)
        evaluator = self._evaluator_for_network()
        outputs = self.network.outputs
        inits = {k: self._tensors[k] for k in self.network.initializers}
        results = evaluator(outputs, {**inits, **feeds})
        # Sequences and optionals (lists, None) are returned as the evaluator gives them.
        return {name: r if r is None or isinstance(r, list) else np.asarray(r) for name, r in zip(outputs, results)}

    def _compile(self, model, where="training graph"):
        try:
            run = ReferenceEvaluator(model, new_ops=op_run_classes(model) + FAST_OPS).run
        except Deep500Error:
            raise
        except Exception as exc:  # noqa: BLE001 - onnx.reference refusing a node's attributes while building
            error = session_error("reference", exc, model, where)
        else:
            error = None
        if error is not None:
            raise error

        def checked_run(names, feeds):
            try:
                return run(names, feeds)
            except Deep500Error:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of a node is reported as an ExecutionError
                error = _node_error(exc, where)
            raise error  # outside the except block: the error keeps no frame of the failed run alive

        return checked_run

    @classmethod
    def supports_custom_domain(cls, domain: str) -> bool:
        """Any domain: registered custom operators run as ``OpRun`` classes."""
        return True


def _node_error(exc: Exception, where):
    """The :class:`ExecutionError` for a failure inside ``ReferenceEvaluator.run``.

    The evaluator runs node by node; its outermost ``run`` frame in the traceback holds the
    failing node (``node.onnx_node``) and its input values, so nothing is recorded beforehand.
    """
    node = inputs = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "run" and isinstance(frame.f_locals.get("self"), ReferenceEvaluator):
            op = frame.f_locals.get("node")
            if getattr(op, "onnx_node", None) is not None:
                node, inputs = op.onnx_node, frame.f_locals.get("inputs")
                break
        tb = tb.tb_next
    tb = frame = None
    shapes = None
    if node is not None and inputs is not None and len(inputs) == len(node.input):
        shapes = ["absent" if not name else shape_of(v) for name, v in zip(node.input, inputs)]
    return execution_error("reference", exc, node, shapes, where)


def from_model(network, device=None, seed: int = 0) -> ReferenceExecutor:
    """Build a :class:`ReferenceExecutor` (CPU only) for a Network, ONNX file or ModelProto."""
    return ReferenceExecutor(network, device, seed)


def from_onnx(onnx_file, device=None, **kwargs) -> ReferenceExecutor:
    """Deep500's ``from_onnx``: read an ONNX file with ``d5.parser.load_and_parse_model``, then :func:`from_model`."""
    from deep500lite.lv1.parser import load_and_parse_model

    return from_model(load_and_parse_model(onnx_file), device, **kwargs)
