"""The ONNX Runtime executor."""

from __future__ import annotations

import re
import time

import onnx
import onnx.numpy_helper
import onnxruntime as ort

from deep500lite.errors import Deep500Error, DeviceError, UnsupportedOperatorError, UserError, UserTypeError, format_choices
from deep500lite.frameworks.onnxruntime.custom import extensions_available, session_options_for
from deep500lite.frameworks.onnxruntime.ops import SUPPORTED_OPS, unsupported_reason
from deep500lite.lv0.custom import CUSTOM_DOMAIN
from deep500lite.lv1.device import Device
from deep500lite.lv1.execution_errors import execution_error, framework_cause, session_error, shape_of
from deep500lite.lv1.host import HostGraphExecutor
from deep500lite.lv1.network import iter_nodes

__all__ = ["OnnxRuntimeExecutor", "from_model", "from_onnx", "OPTIMIZATION_LEVELS"]

#: ``graph_optimization_level`` names and the ``onnxruntime.GraphOptimizationLevel`` members they stand for.
OPTIMIZATION_LEVELS = {name: getattr(ort.GraphOptimizationLevel, member) for name, member in (
    ("disabled", "ORT_DISABLE_ALL"), ("basic", "ORT_ENABLE_BASIC"), ("extended", "ORT_ENABLE_EXTENDED"),
    ("layout", "ORT_ENABLE_LAYOUT"), ("all", "ORT_ENABLE_ALL")) if hasattr(ort.GraphOptimizationLevel, member)}

# Execution providers that the plain onnxruntime package lacks, and the package that has each.
_PROVIDER_PACKAGES = {
    "CUDAExecutionProvider": "onnxruntime-gpu",
    "TensorrtExecutionProvider": "onnxruntime-gpu",
    "DmlExecutionProvider": "onnxruntime-directml",
    "QNNExecutionProvider": "onnxruntime-qnn",
}


class OnnxRuntimeExecutor(HostGraphExecutor):
    """Runs a network in an ``onnxruntime.InferenceSession``.

    ONNX Runtime optimizes the graph (constant folding, fusions, layout changes, as the level
    allows) while it builds a session, so building sessions is this executor's compilation: the
    wall time of every ``InferenceSession`` construction (the inference session, rebuilt after
    parameters change, and each training graph's) is added to :attr:`compile_seconds`.
    :attr:`options` records the level, thread counts and providers.

    Args:
        network: a Network, ONNX file path or ModelProto.
        device: ``"cpu"`` or ``"gpu:N"`` (needs onnxruntime with the CUDA execution provider).
        session_options: an ``onnxruntime.SessionOptions`` (default: all graph optimizations); the
            options below are set on it.
        seed: seed of the dropout masks drawn in training.
        graph_optimization_level: ``"disabled"``, ``"basic"``, ``"extended"``, ``"layout"`` or
            ``"all"`` (:data:`OPTIMIZATION_LEVELS`); None keeps the session options' level.
        intra_op_num_threads: threads inside one operator (0: ONNX Runtime's default).
        inter_op_num_threads: threads across operators (0: ONNX Runtime's default).
        providers: execution provider names (or ``(name, provider options)`` pairs) in priority
            order, such as ``["CUDAExecutionProvider", "CPUExecutionProvider"]``; each must be
            in ``onnxruntime.get_available_providers()``. None: the device's provider.

    Raises:
        UserError: an unknown optimization level, or a thread count that is not an integer >= 0.
        DeviceError: a provider this onnxruntime lacks (the message names the package that has it).
    """

    framework = "onnxruntime"
    SUPPORTED_OPS = SUPPORTED_OPS

    def __init__(self, network, device=None, session_options: ort.SessionOptions | None = None, seed: int = 0,
                 graph_optimization_level: str | None = None, intra_op_num_threads: int | None = None,
                 inter_op_num_threads: int | None = None, providers=None):
        if session_options is None:
            session_options = ort.SessionOptions()
            # warnings only about the graph (unused initializers left by constant folding), not the answers
            session_options.log_severity_level = 3
        self._options = session_options
        if graph_optimization_level is not None:
            if graph_optimization_level not in OPTIMIZATION_LEVELS:
                raise UserError(f"Unknown graph_optimization_level for ONNX Runtime: allowed "
                                f"{format_choices(OPTIMIZATION_LEVELS)}. "
                                f"Received: graph_optimization_level={graph_optimization_level!r}")
            self._options.graph_optimization_level = OPTIMIZATION_LEVELS[graph_optimization_level]
        for name, value in (("intra_op_num_threads", intra_op_num_threads),
                            ("inter_op_num_threads", inter_op_num_threads)):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise UserError(f"{name} must be an integer >= 0 (0: ONNX Runtime's default). "
                                    f"Received: {name}={value!r}")
                setattr(self._options, name, value)
        self._user_providers = _checked_providers(providers)
        self._custom_options: dict = {}  # options with onnxruntime-extensions loaded (custom operators)
        self._session = None
        self.compile_seconds = 0.0
        super().__init__(network, device, seed)
        level = self._options.graph_optimization_level
        self.options = {
            "graph_optimization_level": next((k for k, v in OPTIMIZATION_LEVELS.items() if v == level), str(level)),
            "intra_op_num_threads": int(self._options.intra_op_num_threads),
            "inter_op_num_threads": int(self._options.inter_op_num_threads),
            "providers": [p if isinstance(p, str) else p[0] for p in self._providers()],
        }

    @classmethod
    def supports_device(cls, device: Device) -> bool:
        if not device.is_gpu:
            return True
        return "CUDAExecutionProvider" in ort.get_available_providers()

    @classmethod
    def device_unavailable_reason(cls, device: Device) -> str:
        return ("this onnxruntime has no CUDAExecutionProvider (available: "
                f"{', '.join(ort.get_available_providers())}); install onnxruntime-gpu on a CUDA machine.")

    @classmethod
    def check_supported(cls, network) -> None:
        """Also check each operator's version against this onnxruntime's kernels and opsets."""
        super().check_supported(network)
        for vi in list(network.graph.input) + list(network.graph.output):
            if not vi.type.HasField("tensor_type"):
                raise UnsupportedOperatorError(
                    f"The onnxruntime executor takes and returns tensors only (no sequences, maps or "
                    f"optionals). Received: '{vi.name}', a {vi.type.WhichOneof('value') or 'untyped value'}")
        opset = network.opset
        types = _value_types(network)
        for node in iter_nodes(network.graph):
            if node.domain in ("", "ai.onnx"):
                reason = unsupported_reason(node, opset, types)
                if reason:
                    raise UnsupportedOperatorError(
                        f"The onnxruntime executor cannot run operator '{node.op_type}' "
                        f"(node '{node.name or node.output[0]}'): {reason}. "
                        f"Received: op_type={node.op_type!r} at opset {opset}")

    @classmethod
    def supports_custom_domain(cls, domain: str) -> bool:
        """The ``ai.onnx.contrib`` domain, when onnxruntime-extensions is installed."""
        return domain == CUSTOM_DOMAIN and extensions_available()

    @classmethod
    def custom_domain_reason(cls, domain: str) -> str:
        if domain != CUSTOM_DOMAIN:
            return (f"ONNX Runtime runs custom operators of the domain '{CUSTOM_DOMAIN}' only "
                    "(through onnxruntime-extensions); register the operator there.")
        return "custom operators need onnxruntime-extensions: pip install onnxruntime-extensions."

    def _providers(self):
        if self._user_providers is not None:
            return list(self._user_providers)
        if self.devname.is_gpu:
            return [("CUDAExecutionProvider", {"device_id": self.devname.index}), "CPUExecutionProvider"]
        return ["CPUExecutionProvider"]

    @property
    def session(self) -> ort.InferenceSession:
        """The session, (re)built when parameters or the network changed."""
        if self._session is None:
            self._session = self._session_for(self.network.to_onnx())
            self._output_names = [o.name for o in self._session.get_outputs()]
        return self._session

    def _session_for(self, model) -> ort.InferenceSession:
        """A session for ``model``, restamped first if this onnxruntime reads only older IR/opsets."""
        options = session_options_for(model, self._options, self._custom_options)
        while True:  # each adaptation lowers a version, so this ends
            started = time.perf_counter()
            try:
                return ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                            providers=self._providers(),
                                            disabled_optimizers=_disabled_optimizers(model))
            except Exception as exc:  # noqa: BLE001 - adapted and retried, or reported naming the node
                if isinstance(exc, Deep500Error) or not _adapt_to_runtime(model, str(exc)):
                    error = exc if isinstance(exc, Deep500Error) else session_error("onnxruntime", exc, model)
                    break
            finally:
                self.compile_seconds += time.perf_counter() - started
        raise error

    def inference(self, feeds):
        """Run the network forward (see :meth:`GraphExecutor.inference`).

        ONNX Runtime checks the feeds itself; only when it refuses them are they checked by
        :meth:`Network.check_feeds`, which raises the :class:`FeedError` that says what is wrong
        (or converts scalars and lists to arrays, and the run is retried). The usual path thus
        costs nothing beyond ``InferenceSession.run``.
        """
        session = self.session
        try:
            return dict(zip(self._output_names, session.run(self._output_names, feeds)))
        except Exception as exc:  # noqa: BLE001 - explained below, outside this block
            failure = _failure(exc)
        checked = self.network.check_feeds(feeds)  # a FeedError says what is wrong with the feeds
        if any(checked[k] is not feeds[k] for k in checked):
            try:
                return dict(zip(self._output_names, session.run(self._output_names, checked)))
            except Exception as exc:  # noqa: BLE001
                failure = _failure(exc)
            feeds = checked
        # raised outside the except blocks: the error keeps no frame of the failed run alive
        raise _execution_error(failure, self.network.to_onnx(), feeds, None)

    def _compile(self, model):
        # The runner holds the session and the model, never the executor: an executor and its
        # runner referring to each other would be freed only by a later garbage collection, at
        # an arbitrary point, with the custom-operator libraries its sessions loaded.
        # ONNX Runtime's fast gradient forms, as on the fused path (grad_rewrite.py)
        from deep500lite.frameworks.onnxruntime.grad_rewrite import rewrite_training_model, rewrites_for

        fast = rewrite_training_model(model, rewrites_for(self))[0]
        return _Runner(self._session_for(fast).run, model)

    def _run_checked(self, runner, names, fixed, feeds):
        # As in inference: onnxruntime checks the feeds; check_feeds explains a refusal.
        try:
            return runner(names, {**fixed, **feeds})
        except Exception as exc:  # noqa: BLE001 - explained below, outside this block
            failure = _failure(exc)
        checked = self.network.check_feeds(feeds)
        if any(checked[k] is not feeds[k] for k in checked):
            try:
                return runner(names, {**fixed, **checked})
            except Exception as exc:  # noqa: BLE001
                failure = _failure(exc)
            feeds = checked
        raise _execution_error(failure, runner.model, {**fixed, **feeds}, "training graph")

    def _parameters_changed(self):
        self._session = None

    #: Whether the reference optimizers' steps run fused (training_session.py); False: the host path.
    fused_training = True

    def fused_optimizer_step(self, optimizer, feeds):
        """One step of ``optimizer`` as one session run, or None when it must take the host path.

        See :func:`deep500lite.frameworks.onnxruntime.training_session.fused_step`.
        """
        from deep500lite.frameworks.onnxruntime.training_session import fused_step

        return fused_step(self, optimizer, feeds)

    def _network_changed(self):
        super()._network_changed()
        self._session = None


def _checked_providers(providers) -> list | None:
    """The ``providers`` list, each one checked against ``onnxruntime.get_available_providers()``."""
    if providers is None:
        return None
    if isinstance(providers, str) or not isinstance(providers, (list, tuple)) or not providers:
        raise UserTypeError("providers must be a non-empty list of execution provider names, such as "
                            f"['CPUExecutionProvider']. Received: {providers!r}")
    available = ort.get_available_providers()
    checked = []
    for entry in providers:
        name = entry[0] if isinstance(entry, (list, tuple)) and len(entry) == 2 else entry
        if not isinstance(name, str):
            raise UserTypeError("Each provider is a name or a (name, options dict) pair. "
                                f"Received: {entry!r}")
        if name not in available:
            package = _PROVIDER_PACKAGES.get(name)
            hint = (f" {name} comes with the package {package} (pip install {package}, in place of onnxruntime)."
                    if package else "")
            raise DeviceError(f"This onnxruntime ({ort.__version__}) has no {name}; available providers: "
                              f"{format_choices(available)}.{hint} Received: providers={list(providers)!r}")
        checked.append(tuple(entry) if isinstance(entry, (list, tuple)) else entry)
    return checked


def _disabled_optimizers(model) -> list[str]:
    """ONNX Runtime graph optimizers that would change this model's answer.

    ONNX Runtime's Pad fusion folds a constant-zero ``Pad`` into a following ``MaxPool``'s own
    padding, which pads with minus infinity: where a window holds only negative values and
    padding, the fused pool returns the largest negative value instead of 0 (transformers' BiT
    stem: 0.38% of its output; tests/frameworks/onnxruntime/test_onnxruntime_pad_fusion.py, which
    fails once ONNX Runtime stops doing this). The fusion is one rule of the rule-based level-1
    transformer, which cannot be turned off rule by rule, so that transformer is turned off for
    models with a Pad feeding a MaxPool, and kept for every other model.
    """
    graph = model.graph
    pads = {n.output[0] for n in graph.node if n.op_type == "Pad" and n.output}
    if any(n.op_type == "MaxPool" and n.input and n.input[0] in pads for n in graph.node):
        return ["Level1_RuleBasedTransformer"]
    return []


class _Runner:
    """A compiled training graph: its session's ``run`` and the model (to explain a failure)."""

    __slots__ = ("run", "model")

    def __init__(self, run, model):
        self.run, self.model = run, model

    def __call__(self, names, feeds):
        return self.run(names, feeds)


_NODE_IN_MESSAGE = re.compile(r"running (\w+) node\. Name:'([^']*)'")


def _failure(exc: Exception) -> tuple[str, str | None]:
    """(the cause, the node ONNX Runtime names) of a failed run; keeps no reference to ``exc``."""
    found = _NODE_IN_MESSAGE.search(str(exc))
    return framework_cause(exc), (found.group(2) if found else None)


def _execution_error(failure, model, feeds, where):
    """The :class:`ExecutionError` for ``failure`` in ``model``, with the node's input shapes.

    Shapes come from the feeds and initializers, and for intermediate tensors from a second
    session asked for just those tensors (run only after a failure).
    """
    cause, name = failure
    node = next((n for n in iter_nodes(model.graph) if name and n.name == name), None)
    shapes = None
    if node is not None:
        inits = {i.name: list(i.dims) for i in model.graph.initializer}
        shapes = ["absent" if not x else shape_of(feeds[x]) if x in feeds else inits.get(x) for x in node.input]
        needed = [x for x, sh in zip(node.input, shapes) if x and sh is None]
        if needed:
            try:
                probe = onnx.ModelProto()
                probe.CopyFrom(model)
                del probe.graph.output[:]
                probe.graph.output.extend(onnx.ValueInfoProto(name=x) for x in needed)
                # onnxruntime runs every node of a graph: keep only those the inputs need
                producers = {o: i for i, n in enumerate(probe.graph.node) for o in n.output}
                keep, stack = set(), list(needed)
                while stack:
                    i = producers.get(stack.pop())
                    if i is not None and i not in keep:
                        keep.add(i)
                        stack.extend(x for x in probe.graph.node[i].input if x)
                nodes = [n for i, n in enumerate(probe.graph.node) if i in keep]
                del probe.graph.node[:]
                probe.graph.node.extend(nodes)
                inputs = {i.name for i in probe.graph.input}
                while True:  # as _session_for: restamp a model newer than this onnxruntime reads
                    try:
                        session = ort.InferenceSession(probe.SerializeToString())
                        break
                    except Exception as exc:  # noqa: BLE001 - adapted and retried, or given up below
                        if not _adapt_to_runtime(probe, str(exc)):
                            raise
                values = session.run(needed, {k: v for k, v in feeds.items() if k in inputs})
                found = dict(zip(needed, values))
                shapes = [shape_of(found[x]) if x in found else sh for x, sh in zip(node.input, shapes)]
            except Exception:  # noqa: BLE001 - the shapes are a help; the error stands without them
                pass
    return execution_error("onnxruntime", cause, node, shapes, where)


def _value_types(network) -> dict[str, str]:
    """Tensor name -> ``tensor(float)``-style type, from the graph and ONNX shape inference."""
    model = onnx.ModelProto()
    model.CopyFrom(network._model)
    # The host values have the dtypes and shapes of the executor's (they are not read otherwise).
    model.graph.initializer.extend(onnx.numpy_helper.from_array(v, k) for k, v in network.host_values().items())
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - types are a refinement; the declared ones still count
        pass
    types = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = f"tensor({_TYPE_NAMES[vi.type.tensor_type.elem_type]})"
    for init in model.graph.initializer:
        types[init.name] = f"tensor({_TYPE_NAMES[init.data_type]})"
    return types


_TYPE_NAMES = {v: k.lower() for k, v in onnx.TensorProto.DataType.items()}
_TYPE_NAMES[onnx.TensorProto.STRING] = "string"
_TYPE_NAMES[onnx.TensorProto.BOOL] = "bool"


def _adapt_to_runtime(model, message: str) -> bool:
    """Restamp a model that onnx wrote newer than this onnxruntime reads, when that is exact.

    The IR version is lowered to the newest one onnxruntime accepts, and the default opset to
    its newest one when no operator of the model changed between the two opsets (so the
    semantics are the same). Returns whether anything was changed.
    """
    ir = re.search(r"max supported IR version: (\d+)", message)
    if ir and model.ir_version > int(ir.group(1)):
        model.ir_version = int(ir.group(1))
        return True
    opset = re.search(r"domain ai\.onnx is till opset (\d+)", message)
    if opset:
        target = int(opset.group(1))
        entry = next((o for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        if entry is None or entry.version <= target:
            return False
        for node in iter_nodes(model.graph):
            if node.domain not in ("", "ai.onnx"):
                continue
            try:
                old = onnx.defs.get_schema(node.op_type, target).since_version
            except onnx.defs.SchemaError:
                return False
            if old != onnx.defs.get_schema(node.op_type, entry.version).since_version:
                return False
        entry.version = target
        return True
    return False


def from_model(network, device=None, **kwargs) -> OnnxRuntimeExecutor:
    """Build an :class:`OnnxRuntimeExecutor` for a Network, ONNX file or ModelProto."""
    return OnnxRuntimeExecutor(network, device, **kwargs)


def from_onnx(onnx_file, device=None, **kwargs) -> OnnxRuntimeExecutor:
    """Deep500's ``from_onnx``: read an ONNX file with ``d5.parser.load_and_parse_model``, then :func:`from_model`."""
    from deep500lite.lv1.parser import load_and_parse_model

    return from_model(load_and_parse_model(onnx_file), device, **kwargs)
