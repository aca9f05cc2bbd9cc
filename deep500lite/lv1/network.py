"""Level 1: the ONNX-backed network and ``load_model``.

A :class:`Network` holds an ONNX graph and the values of its tensors (parameters, gradients).
It is framework-neutral: an executor built from it (``d5.executor(network, "torch")``) runs the
graph and keeps the parameters on its device; while an executor is attached, ``feed_tensor`` and
``fetch_tensors`` go to that executor, so they always see the values the executor trains.
"""

from __future__ import annotations

import copy
import math
import os
import weakref
from typing import Iterable, Sequence

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper
from google.protobuf.message import DecodeError, Message

from deep500lite.errors import FeedError, ModelError, UserKeyError, UserTypeError
from deep500lite.lv0.tensordesc import TensorDescriptor
from deep500lite.lv1.control_flow import subgraph_captures
from deep500lite.utils import check_allocation
from deep500lite.lv1.model_checks import check_model_proto
from deep500lite.lv1.value_info import ValueInfo

__all__ = ["Network", "load_model", "FLOAT_DTYPES"]

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))

# Inputs of these operators are state, not trainable parameters: (op_type, input index).
_NON_TRAINABLE_INPUTS = {("BatchNormalization", 3), ("BatchNormalization", 4)}


def _value_info_desc(vi: onnx.ValueInfoProto) -> TensorDescriptor | None:
    t = vi.type
    if not t.HasField("tensor_type") or t.tensor_type.elem_type == 0:
        return None
    dtype = _np_dtype(t.tensor_type.elem_type, f"value '{vi.name}'")
    if not t.tensor_type.HasField("shape"):
        return TensorDescriptor(dtype, None)
    dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim)
    return TensorDescriptor(dtype, dims)


def _np_dtype(elem_type: int, what: str) -> np.dtype:
    """The numpy dtype of an ONNX element type; ModelError for a type onnx does not define."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        names = ", ".join(sorted(onnx.TensorProto.DataType.keys())[:8])
        raise ModelError(f"The model's {what} has element type {elem_type}, which onnx {onnx.__version__} does not "
                         f"define (types are TensorProto.DataType values: {names}, ...). "
                         f"Received: elem_type {elem_type}") from None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class Deep500NetworkNames:
    """Deep500's accessor names, for any network object with ``inputs``, ``outputs``, ``parameters``
    and ``input_descriptors()``/``output_descriptors()``."""

    def get_params(self) -> list[str]:
        """Deep500 name for :attr:`parameters`."""
        return self.parameters

    def get_input_nodes(self) -> list[ValueInfo]:
        """The input nodes, as Deep500 gave them: ``node.name``, ``node.type.shape.shape``, ``node.type.type``.

        Each node is also its name (a ``str``), so the list compares equal to :attr:`inputs`.
        """
        descs = self.input_descriptors()
        return [ValueInfo.from_descriptor(n, descs.get(n)) for n in self.inputs]

    def get_output_nodes(self) -> list[ValueInfo]:
        """The output nodes (see :meth:`get_input_nodes`); the list compares equal to :attr:`outputs`."""
        descs = self.output_descriptors()
        return [ValueInfo.from_descriptor(n, descs.get(n)) for n in self.outputs]

    def get_inputs(self) -> list[str]:
        """Deep500 name for :attr:`inputs` (names only)."""
        return list(self.inputs)

    def get_outputs(self) -> list[str]:
        """Deep500 name for :attr:`outputs` (names only)."""
        return list(self.outputs)


class Network(Deep500NetworkNames):
    """An ONNX network and the values of its tensors.

    Use :func:`load_model` to make one from a file or a ``ModelProto``. The given ``ModelProto``
    is only read: the network keeps its own copy of the graph and its initializer values, so the
    caller's proto is never changed (and later changes to it do not reach the network).

    Args:
        model: the ONNX model.
        source: the file it was read from, if any.

    Attributes:
        source: the file the network was read from, or ``None``.
    """

    def __init__(self, model: onnx.ModelProto, source: str | None = None):
        if not isinstance(model, onnx.ModelProto):
            raise UserTypeError(f"Network expects an onnx.ModelProto. Received: {type(model).__name__}")
        # The caller's ModelProto is only read: the network keeps a copy of its structure.
        self._init(_structure_copy(model), model, source)

    @classmethod
    def _own(cls, model: onnx.ModelProto, source: str | None = None) -> "Network":
        """A network that takes ``model`` over (no copy): for protos deep500lite made itself."""
        network = cls.__new__(cls)
        network._init(model, model, source)
        return network

    def _init(self, structure: onnx.ModelProto, model: onnx.ModelProto, source: str | None) -> None:
        self.source = source
        self._model = structure
        self._values: dict[str, np.ndarray] = {}
        for init in model.graph.initializer:
            self._values[init.name] = _initializer_value(init, source)
        # Initializer data lives in _values from now on; the graph keeps the structure only.
        if len(structure.graph.initializer):
            del structure.graph.initializer[:]
        self._initializer_names = list(self._values)
        self._executor_ref = None
        self._input_cache = None  # (structure key, input descriptors): feeds are checked every call
        self._accepted_feeds = None  # (structure key, signatures of feeds check_feeds accepted)
        self._io_cache = None  # (structure key, inputs, outputs): executors read them on every call
        self.version = 0

    # ----------------------------------------------------------------- structure
    @property
    def graph(self) -> onnx.GraphProto:
        """The ONNX graph (structure only; initializer values are held by the network)."""
        return self._model.graph

    @property
    def opset(self) -> int:
        """The default-domain opset version the model imports."""
        for o in self._model.opset_import:
            if o.domain in ("", "ai.onnx"):
                return o.version
        return onnx.defs.onnx_opset_version()

    @property
    def inputs(self) -> list[str]:
        """Names of the inputs that must be fed (graph inputs that are not initializers)."""
        return list(self._io_names()[1])

    @property
    def outputs(self) -> list[str]:
        """Names of the graph outputs."""
        return list(self._io_names()[2])

    def _io_names(self) -> tuple:
        """``(key, inputs, outputs)``, read from the graph's protobuf once per structure.

        Executors ask for the names on every call, and walking the protobuf fields took a few
        microseconds each time. The key is the structure version and the initializer, graph
        input and graph output counts, so a change through the Network API (which bumps the
        version) or an input or output added to or removed from the graph by hand is seen.
        """
        graph = self._model.graph
        key = (self.version, len(self._initializer_names), len(graph.input), len(graph.output))
        cached = self._io_cache
        if cached is None or cached[0] != key:
            inits = set(self._initializer_names)
            cached = self._io_cache = (key, tuple(i.name for i in graph.input if i.name not in inits),
                                       tuple(o.name for o in graph.output))
        return cached

    @property
    def initializers(self) -> list[str]:
        """Names of all initializers (parameters and constants such as shapes)."""
        return list(self._initializer_names)

    @property
    def parameters(self) -> list[str]:
        """Names of the floating-point initializers: the network's parameters."""
        return [n for n in self._initializer_names if self._values_for(n).dtype in FLOAT_DTYPES]

    def input_descriptors(self) -> dict[str, TensorDescriptor | None]:
        """The declared dtype and shape of every input (``None`` where the model declares none)."""
        key = (self.version, len(self._initializer_names))
        if self._input_cache is None or self._input_cache[0] != key:
            inputs = set(self.inputs)
            descs = {i.name: _value_info_desc(i) for i in self.graph.input if i.name in inputs}
            self._input_cache = (key, descs)
        return self._input_cache[1]

    def output_descriptors(self) -> dict[str, TensorDescriptor | None]:
        """The declared dtype and shape of every output (``None`` where the model declares none)."""
        return {o.name: _value_info_desc(o) for o in self.graph.output}

    def operators(self) -> list[str]:
        """The distinct operator types of the top-level graph, in first-use order."""
        seen: dict[str, None] = {}
        for n in self.graph.node:
            seen.setdefault(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}")
        return list(seen)

    def add_operation(self, operation, inputs: dict[str, TensorDescriptor] | None = None) -> int:
        """Append an operation (one ONNX node, a list of nodes, or an object with ``.nodes``).

        Inputs of the operation that no node, initializer or graph input produces become new
        graph inputs; their descriptors come from ``inputs`` or from the operation's own
        ``new_inputs``. Outputs of the operation that nothing consumes become graph outputs.

        Args:
            operation: an ``onnx.NodeProto``, a list of them, or an object with attributes
                ``nodes`` (list of NodeProto) and optionally ``new_inputs`` (dict of descriptors);
                an object with a method ``nodes_for(graph)`` gets its nodes from that instead.
            inputs: descriptors for inputs the network does not have yet.

        Returns:
            The index in ``graph.node`` of the first added node (as Deep500's ``add_operation``
            returned the place of the operation; nodes are appended, so it is the old node count).

        Raises:
            ModelError: an input is unknown and has no descriptor, or the result is not valid ONNX.
        """
        if isinstance(operation, onnx.NodeProto):
            nodes, new_inputs = [operation], {}
        elif isinstance(operation, (list, tuple)) and all(isinstance(n, onnx.NodeProto) for n in operation):
            nodes, new_inputs = list(operation), {}
        elif hasattr(operation, "nodes_for"):  # an operation whose nodes depend on the graph
            nodes, new_inputs = list(operation.nodes_for(self.graph)), dict(getattr(operation, "new_inputs", {}) or {})
        elif hasattr(operation, "nodes"):
            nodes, new_inputs = list(operation.nodes), dict(getattr(operation, "new_inputs", {}) or {})
        else:
            raise UserTypeError(
                "add_operation expects an onnx.NodeProto, a list of them, or an operation with "
                f"'.nodes'. Received: {type(operation).__name__}"
            )
        new_inputs.update(inputs or {})
        known = set(self._initializer_names) | {i.name for i in self.graph.input}
        for n in self.graph.node:
            known.update(n.output)
        added_inputs = []
        for node in nodes:
            for name in node.input:
                if name and name not in known:
                    if name not in new_inputs:
                        raise ModelError(
                            f"Operation {node.op_type} reads '{name}', which the network does not "
                            f"have. Known tensors include the inputs {self.inputs}; pass "
                            f"inputs={{'{name}': d5.tensordesc(dtype, shape)}} to add it as an input. "
                            f"Received: {name!r}"
                        )
                    added_inputs.append(new_inputs[name].value_info(name))
                    known.add(name)
            known.update(node.output)
        consumed = {i for n in list(self.graph.node) + nodes for i in n.input}
        place = len(self.graph.node)
        self.graph.input.extend(added_inputs)
        self.graph.node.extend(nodes)
        imported = {o.domain for o in self._model.opset_import}
        for node in nodes:
            if node.domain not in ("", "ai.onnx") and node.domain not in imported:
                self._model.opset_import.append(onnx.helper.make_opsetid(node.domain, 1))
                imported.add(node.domain)
        for node in nodes:
            for out in node.output:
                if out and out not in consumed and out not in self.outputs:
                    self._append_output(out)
        self._changed()
        return place

    def add_custom_operation(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str],
                             op=None, name: str | None = None, domain: str | None = None,
                             input_descriptors: dict[str, TensorDescriptor] | None = None) -> onnx.NodeProto:
        """Append a node running a custom operator (see :mod:`deep500lite.lv0.custom`).

        The node is ``domain::op_type``; its outputs get value infos from the operator's output
        descriptors, so shape inference continues through it.

        Args:
            op_type: the op type the operator is (or is now) registered under.
            inputs: input tensor names, in the operator's input order.
            outputs: output tensor names.
            op: the operator; when given it is registered as ``domain::op_type`` first
                (:func:`d5.register_op`). Without it, ``op_type`` must already be registered.
            name: the node name.
            domain: the operator domain (default ``ai.onnx.contrib``).
            input_descriptors: descriptors for inputs the network does not have yet.

        Returns:
            The node that was added.

        Raises:
            UnsupportedOperatorError: no ``op`` given and nothing registered as ``domain::op_type``
                (the message every executor gives for such a node, from
                :func:`~deep500lite.lv0.custom.lookup_custom_op`).
            ModelError: the operator's input/output counts differ from ``inputs``/``outputs``.
        """
        from deep500lite.lv0 import custom

        domain = custom.CUSTOM_DOMAIN if domain is None else domain
        if op is not None:
            custom.register_op(op, op_type, domain)
        registered = custom.lookup_custom_op(op_type, domain)
        n_in, n_out = len(registered.input_descriptors), len(registered.output_descriptors)
        if len(inputs) != n_in or len(outputs) != n_out:
            raise ModelError(f"Custom operator '{op_type}' takes {n_in} input(s) and gives {n_out} output(s). "
                             f"Received: inputs={list(inputs)}, outputs={list(outputs)}")
        node = custom.custom_node(op_type, inputs, outputs, name=name, domain=domain)
        known = {vi.name for vi in self.graph.value_info}
        self.graph.value_info.extend(vi for vi in custom.output_value_infos(registered, outputs)
                                     if vi.name not in known)
        self.add_operation(node, inputs=input_descriptors)
        return node

    def add_output(self, name: str) -> None:
        """Make an intermediate tensor a graph output so that executors return it."""
        if name in self.outputs:
            return
        produced = {o for n in self.graph.node for o in n.output} | set(self.inputs)
        if name not in produced:
            raise ModelError(
                f"Cannot add output '{name}': no node produces it. Node outputs include "
                f"{sorted(produced)[:20]}. Received: {name!r}"
            )
        self._append_output(name)
        self._changed()

    def _append_output(self, name: str) -> None:
        inferred = self._infer_value_info(name)
        self.graph.output.append(inferred or onnx.helper.ValueInfoProto(name=name))

    def _infer_value_info(self, name: str) -> onnx.ValueInfoProto | None:
        try:
            inferred = onnx.shape_inference.infer_shapes(self.to_onnx())
        except Exception:  # shape inference is a best effort; the executor still runs the graph
            return None
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
            if vi.name == name:
                return vi
        return None

    def _changed(self) -> None:
        self.version += 1
        ex = self.executor
        if ex is not None:
            ex._network_changed()

    # -------------------------------------------------------------------- values
    @property
    def executor(self) -> "deep500lite.lv1.executor.GraphExecutor | None":  # noqa: F821 - not imported: no circle
        """The executor this network is attached to, if any."""
        return None if self._executor_ref is None else self._executor_ref()

    def _attach(self, executor: "deep500lite.lv1.executor.GraphExecutor") -> "Network":  # noqa: F821
        """Attach to ``executor``; a network attached elsewhere is copied instead.

        The copy holds the values the network holds on the host (:meth:`host_values`: those it was
        built or loaded with, or fed while detached), not what the other executor has trained since,
        so every executor made from one network starts from the same weights, as each executor that
        Deep500's ``from_model(model)`` built started from the model's initializers.
        """
        if self.executor is not None and self.executor is not executor:
            model = copy.deepcopy(self._model)
            model.graph.initializer.extend(
                numpy_helper.from_array(np.asarray(self._values[k]), k) for k in self._initializer_names)
            clone = Network._own(model, source=self.source)
            clone._executor_ref = weakref.ref(executor)
            return clone
        self._executor_ref = weakref.ref(executor)
        return self

    def _values_for(self, name: str) -> np.ndarray:
        return self._values[name]

    def host_values(self) -> dict[str, np.ndarray]:
        """The values the network holds on the host (initial parameters unless detached/fed)."""
        return self._values

    def feed_tensor(self, name: str, value, is_param: bool = False) -> None:
        """Set the value of a tensor (a parameter, or a new tensor with ``is_param=True``).

        Args:
            name: the tensor's name.
            value: an array-like; it must keep the parameter's shape and dtype.
            is_param: allow adding a new parameter that the graph does not hold yet.

        Raises:
            FeedError: the name is unknown, or the shape or dtype does not match.
        """
        value = np.asarray(value)
        if name in self._values:
            old = self._values[name]
            if old.shape != value.shape or old.dtype != value.dtype:
                raise FeedError(
                    f"feed_tensor('{name}'): expected {old.dtype.name}{list(old.shape)}. "
                    f"Received: {value.dtype.name}{list(value.shape)}"
                )
        elif not is_param:
            raise FeedError(
                f"feed_tensor: unknown tensor '{name}'. Known parameters: {self.parameters[:20]}; "
                f"pass is_param=True to add a new one. Received: {name!r}"
            )
        ex = self.executor
        if ex is not None and name in self._initializer_names:
            ex.feed_tensor(name, value)
        else:
            self._values[name] = value
            if name not in self._initializer_names:
                self._initializer_names.append(name)

    def fetch_tensors(self, names: Sequence[str]) -> list[np.ndarray]:
        """The current values of the named tensors (parameters, or gradients after backprop).

        Raises:
            UserKeyError: a name the network and its executor do not hold (a ``KeyError``).
            UserTypeError: ``names`` is one string instead of a list.
        """
        if isinstance(names, str):
            raise UserTypeError(f"fetch_tensors expects a list of names. Received: the string {names!r}")
        ex = self.executor
        out = []
        for name in names:
            if ex is not None and ex.has_tensor(name):
                out.append(ex.fetch_tensor(name))
            elif name in self._values:
                out.append(self._values[name])
            else:
                raise UserKeyError(
                    f"fetch_tensors: no tensor '{name}'. Parameters: {self.parameters[:20]}"
                    + ("" if ex is None else "; gradients are available after inference_and_backprop")
                    + f". Received: {name!r}"
                )
        return out

    def fetch_tensor(self, name: str) -> np.ndarray:
        """The current value of one tensor."""
        return self.fetch_tensors([name])[0]

    def gradient(self, y: str = "loss") -> list[tuple[str, str]]:
        """The ``(parameter name, gradient name)`` pairs of every trainable parameter ``y`` depends on.

        Gradient values can be fetched with :meth:`fetch_tensors` after
        ``executor.inference_and_backprop(feeds, y)``.
        """
        producers = {o: n for n in self.graph.node for o in n.output}
        if y not in producers and y not in self.inputs:
            raise ModelError(f"gradient: '{y}' is not a tensor of the network. Outputs: {self.outputs}. "
                             f"Received: y={y!r}")
        params = set(self.parameters)
        found: dict[str, None] = {}
        stack, seen = [y], set()
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            node = producers.get(t)
            if node is None:
                continue
            # values the node's subgraphs (If, Loop, Scan bodies) read count as its inputs
            for idx, name in enumerate(list(node.input) + subgraph_captures(node)):
                if not name:
                    continue
                if name in params and (node.op_type, idx) not in _NON_TRAINABLE_INPUTS:
                    found.setdefault(name)
                stack.append(name)
        ordered = [p for p in self.parameters if p in found]
        return [(p, gradient_name(p)) for p in ordered]

    # --------------------------------------------------------------------- feeds
    def check_feeds(self, feeds) -> dict[str, np.ndarray]:
        """Check feeds against the declared inputs and return them as numpy arrays.

        Feeds whose signature (names in declared order, then each array's shape and dtype) was
        accepted before are passed on without checking again: executors call this on every run,
        and a signature accepted once is accepted again until the network's structure changes.

        Returns:
            A new dict from each input name, in declared order, to its numpy array.

        Raises:
            FeedError: a feed is missing, unknown, or has the wrong dtype or shape.
        """
        signature = _feed_signature(feeds)
        accepted = self._accepted_feeds
        if (signature is not None and accepted is not None and signature in accepted[1]
                and accepted[0] == (self.version, len(self._initializer_names))):
            return dict(feeds)
        out = self._checked_feeds(feeds)
        if signature is not None and list(out) == list(feeds):
            key = (self.version, len(self._initializer_names))
            if accepted is None or accepted[0] != key or len(accepted[1]) >= _MAX_FEED_SIGNATURES:
                accepted = self._accepted_feeds = (key, set())
            accepted[1].add(signature)
        return out

    def _checked_feeds(self, feeds) -> dict[str, np.ndarray]:
        """:meth:`check_feeds` without the cache of accepted signatures."""
        if not isinstance(feeds, dict):
            raise FeedError(f"Feeds must be a dict of input name to array. Received: {type(feeds).__name__}")
        declared = self.input_descriptors()
        if len(feeds) != len(declared) or any(k not in declared for k in feeds):
            unknown = [k for k in feeds if k not in declared]
            if unknown:
                raise FeedError(f"Unknown input(s) {unknown}. The network's inputs are {list(declared)}. "
                                f"Received: feeds for {list(feeds)}")
            missing = [k for k in declared if k not in feeds]
            raise FeedError(f"Missing input(s) {missing}. The network's inputs are {list(declared)}. "
                            f"Received: feeds for {list(feeds)}")
        out = {}
        for name, desc in declared.items():
            value = feeds[name]
            if desc is None:  # a sequence, optional or untyped input: passed on as given
                out[name] = value
                continue
            arr = value if isinstance(value, np.ndarray) else np.asarray(value)
            if arr.dtype != desc.dtype:
                raise FeedError(
                    f"Input '{name}' must have dtype {desc.dtype.name}. Received: {arr.dtype.name} "
                    f"(convert it with .astype(np.{desc.dtype.name}))"
                )
            if desc.shape is not None and not desc.matches(arr):
                raise FeedError(
                    f"Input '{name}' must have shape {_shape_str(desc.shape)}. Received: {list(arr.shape)}"
                )
            out[name] = arr
        return out

    def random_feeds(self, batch_size: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
        """Random feeds for every input: normal floats, zero integers, False booleans.

        Dimensions the model leaves open take ``batch_size`` for the first axis and 1 elsewhere.

        Raises:
            FeedError: an input declares no type, so no feed can be made for it.
        """
        rng = np.random.default_rng(seed)
        feeds = {}
        for name, desc in self.input_descriptors().items():
            if desc is None or desc.shape is None:
                raise FeedError(f"Input '{name}' declares no {'type' if desc is None else 'shape'}; "
                                "random inputs cannot be made for it. Pass inputs explicitly. "
                                f"Received: {'no type' if desc is None else desc.dtype.name + ' with no shape'}")
            shape = [d if d is not None else (batch_size if i == 0 else 1) for i, d in enumerate(desc.shape)]
            # Normal values are drawn as float64 before the cast, so that is the size to check.
            itemsize = 8 if desc.dtype.kind == "f" else desc.dtype.itemsize
            check_allocation(math.prod(shape) * (itemsize + desc.dtype.itemsize),
                             f"A random feed for input '{name}' of shape {shape}", error=FeedError)
            if desc.dtype.kind == "f":
                feeds[name] = rng.standard_normal(shape).astype(desc.dtype)
            else:
                feeds[name] = np.zeros(shape, desc.dtype)
        return feeds

    # ------------------------------------------------------------------- export
    def to_onnx(self) -> onnx.ModelProto:
        """A ModelProto of the network with the current parameter values as initializers."""
        model = copy.deepcopy(self._model)
        values = self.fetch_tensors(self._initializer_names)
        model.graph.initializer.extend(
            numpy_helper.from_array(np.asarray(v), k) for k, v in zip(self._initializer_names, values))
        return model

    def save(self, path: str | os.PathLike) -> None:
        """Write the network, with current values, to an ONNX file (atomically)."""
        from deep500lite.utils import atomic_write_bytes

        atomic_write_bytes(path, self.to_onnx().SerializeToString())

    def copy(self) -> "Network":
        """A detached copy holding the current values."""
        return Network._own(self.to_onnx(), source=self.source)

    def __repr__(self) -> str:
        return (f"Network(source={self.source!r}, inputs={self.inputs}, outputs={self.outputs}, "
                f"parameters={len(self.parameters)}, nodes={len(self.graph.node)})")


# At most this many feed signatures (batch sizes, in practice) are remembered per network.
_MAX_FEED_SIGNATURES = 64


def _feed_signature(feeds) -> tuple | None:
    """``(name, shape, dtype)`` of every feed in order, or None unless all are plain numpy arrays.

    Only plain ``np.ndarray`` feeds in a plain dict get a signature: anything else (lists,
    scalars, array subclasses) is converted or refused by the full check every time.
    """
    if type(feeds) is not dict:
        return None
    signature = []
    for name, value in feeds.items():
        if type(value) is not np.ndarray:
            return None
        signature.append((name, value.shape, value.dtype))
    return tuple(signature)


def _initializer_value(init: onnx.TensorProto, source: str | None) -> np.ndarray:
    """An initializer's array; ModelError naming it when its type or data cannot make one."""
    where = f"ONNX model {source!r}" if source else "The ONNX model"
    _np_dtype(init.data_type, f"initializer '{init.name}'")
    count = math.prod(init.dims)
    if any(d < 0 for d in init.dims):
        raise ModelError(f"{where}: initializer '{init.name}' has a negative dimension; dimensions must be >= 0. "
                         f"Received: dims {list(init.dims)}")
    check_allocation(count * 16, f"{where}: initializer '{init.name}' of dims {list(init.dims)}", error=ModelError)
    try:
        return numpy_helper.to_array(init)
    except Exception as exc:  # noqa: BLE001 - onnx raises ValueError, TypeError or KeyError on bad tensor data
        raise ModelError(f"{where}: initializer '{init.name}' cannot be read: its data must hold the "
                         f"{count} values its dims {list(init.dims)} give, in its element type. "
                         f"Received: {_short(exc)}") from None


def gradient_name(param: str) -> str:
    """The name under which the gradient of ``param`` is stored."""
    return f"{param}_grad"


def _shape_str(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _check_external_data(model: onnx.ModelProto, base_dir: str | None, where: str) -> None:
    tensors = list(external_data_helper._get_all_tensors(model))
    external = [t for t in tensors if t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return
    if base_dir is None:
        raise ModelError(
            f"{where} stores tensor '{external[0].name}' in an external file; load it from its file "
            "path (so deep500lite knows the folder) or pass base_dir=. Received: base_dir=None"
        )
    root = os.path.realpath(base_dir)
    plans = [_external_plan(t, root, where) for t in external]  # every field checked before anything is read
    for t, (target, loc, offset, length) in zip(external, plans):
        _read_external(t, target, loc, offset, length, where)


#: The keys of a tensor's ``external_data`` (onnx's ExternalDataInfo).
_EXTERNAL_KEYS = ("location", "offset", "length", "checksum", "basepath")


def _external_plan(t, root: str, where: str) -> tuple:
    """``(file, location, offset, length)`` of one tensor's external data, every field checked."""
    from deep500lite.escaping import terminal

    info = {}
    for entry in t.external_data:
        if entry.key not in _EXTERNAL_KEYS:
            raise ModelError(f"{where}: tensor '{terminal(t.name)}' has an external_data entry {entry.key!r}; the "
                             f"keys are {', '.join(_EXTERNAL_KEYS)}. Received: {entry.key!r}")
        info[entry.key] = entry.value
    loc = info.get("location", "")
    if not loc or os.path.isabs(loc) or "\x00" in loc:
        raise ModelError(f"{where}: tensor '{terminal(t.name)}' has external data at an absolute or empty path, or "
                         "one holding a NUL byte; only paths relative to the model's folder are allowed. Received: "
                         f"location={loc!r}")
    numbers = {}
    for key in ("offset", "length"):
        text = info.get(key)
        if text is not None and not (text.isascii() and text.isdigit() and len(text) <= 20):
            raise ModelError(f"{where}: tensor '{terminal(t.name)}' has external data {key} {text!r}; it must be a "
                             f"whole number of bytes >= 0 written in decimal digits. Received: {key}={text!r}")
        numbers[key] = None if text is None else int(text)
    target = os.path.realpath(os.path.join(root, loc))
    if os.path.commonpath([root, target]) != root:
        raise ModelError(
            f"{where}: tensor '{terminal(t.name)}' has external data at {loc!r}, which points outside the "
            f"model's folder {root!r}; refusing to read it. External data must lie inside the model's "
            f"folder. Received: location={loc!r}"
        )
    if not os.path.lexists(target):
        raise ModelError(f"{where}: external data file {loc!r} for tensor '{terminal(t.name)}' is missing "
                         f"(looked in {root!r}); put it in the model's folder. Received: location={loc!r}")
    return target, loc, numbers["offset"] or 0, numbers["length"]


def _read_external(t, target: str, loc: str, offset: int, length: int | None, where: str) -> None:
    """Read one tensor's external bytes through the checked opener and keep them in the tensor."""
    from deep500lite.escaping import terminal
    from deep500lite.input_files import open_input
    from deep500lite.utils import check_allocation

    with open_input(target, f"{where}: external data file {loc!r}", error=ModelError) as f:
        size = os.fstat(f.fileno()).st_size
        end = size if length is None else offset + length
        if offset > size or end > size:
            raise ModelError(f"{where}: tensor '{terminal(t.name)}' reads bytes {offset:,} to {end:,} of external data "
                             f"file {loc!r}, which has {size:,} bytes. Received: offset={offset}, length={length}")
        check_allocation(end - offset, f"{where}: external data of tensor '{terminal(t.name)}'", ModelError)
        f.seek(offset)
        data = f.read(end - offset)
    if len(data) != end - offset:
        raise ModelError(f"{where}: external data file {loc!r} ended early while tensor '{terminal(t.name)}' was read. "
                         f"Received: {len(data):,} of {end - offset:,} bytes")
    t.raw_data = data
    t.data_location = onnx.TensorProto.DEFAULT
    del t.external_data[:]


def load_model(model, base_dir: str | None = None, check: bool = True) -> Network:
    """Load an ONNX model into a :class:`Network`.

    Args:
        model: a file path, the serialized bytes of a model, an ``onnx.ModelProto`` or a Network
            (returned as is).
        base_dir: the folder external-data paths are relative to (defaults to the file's folder).
        check: run ``onnx.checker`` on the model.

    Returns:
        The network.

    Raises:
        ModelError: the file is missing, not ONNX, truncated or invalid, or its external data
            points outside the model's folder.
        UserTypeError: ``model`` is of another type.

    >>> import deep500lite as d5
    >>> net = d5.load_model("model.onnx")  # doctest: +SKIP
    """
    if isinstance(model, Network):
        return model
    source = None
    if isinstance(model, (str, os.PathLike)):
        from deep500lite.input_files import input_path, read_input_bytes

        source = input_path(model, "ONNX model", ModelError)
        where = f"ONNX model {source!r}"
        # a folder, a FIFO or a device is refused; a protobuf holds at most 2 GiB
        data = read_input_bytes(source, "ONNX model", limit=2**31, error=ModelError)
        base_dir = base_dir if base_dir is not None else os.path.dirname(os.path.abspath(source))
        proto = _parse(data, where)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        where = "ONNX model (bytes)"
        proto = _parse(bytes(model), where)
    elif isinstance(model, onnx.ModelProto):
        where = "ONNX model (ModelProto)"
        proto = copy.deepcopy(model)
    else:
        raise UserTypeError(
            "load_model expects a file path, bytes, an onnx.ModelProto or a d5.Network. "
            f"Received: {type(model).__name__}"
        )
    if not proto.HasField("graph") or (len(proto.graph.node) == 0 and len(proto.graph.output) == 0):
        found = (f"a graph with {len(proto.graph.node)} nodes and {len(proto.graph.output)} outputs"
                 if proto.HasField("graph") else "no graph")
        raise ModelError(f"{where} holds no ONNX graph (no nodes and no outputs); is it an ONNX file? "
                         f"Received: {found}")
    if proto.ir_version == 0:
        raise ModelError(f"{where} has no IR version; the file is not an ONNX model or is damaged. "
                         "Received: ir_version 0")
    _check_external_data(proto, base_dir, where)
    if check:
        check_model_proto(proto, where)
    return Network._own(proto, source=source)


def _structure_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` without its initializers (their data is not copied at all)."""
    copy_ = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name != "graph":
            _copy_field(copy_, field, value)
    for field, value in model.graph.ListFields():
        if field.name != "initializer":
            _copy_field(copy_.graph, field, value)
    if model.HasField("graph"):
        copy_.graph.SetInParent()
    return copy_


def _copy_field(target, field, value) -> None:
    if isinstance(value, Message):
        getattr(target, field.name).CopyFrom(value)
    elif not isinstance(value, (str, bytes)) and hasattr(value, "extend"):  # a repeated field
        getattr(target, field.name).extend(value)
    else:
        setattr(target, field.name, value)


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    if not data:
        raise ModelError(f"{where} is empty (0 bytes); give a serialized ONNX model. Received: 0 bytes")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ModelError(
            f"{where} cannot be decoded as an ONNX protobuf (the bytes are not a valid ModelProto message); the "
            f"file is truncated, damaged or not an ONNX model. Received: {len(data)} bytes starting {data[:8]!r}"
        ) from exc
    return proto


_CONSTANT_ATTRIBUTES = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                        "value_ints": np.int64, "value_string": object, "value_strings": object}


def constant_attribute_value(attrs: dict) -> np.ndarray | None:
    """The value of a Constant node from its parsed attributes (``value`` or ``value_float(s)``,
    ``value_int(s)``, ``value_string(s)``); None for a form it does not cover (sparse values)."""
    if "value" in attrs:
        return np.asarray(attrs["value"])
    for name, dtype in _CONSTANT_ATTRIBUTES.items():
        if name in attrs:
            return np.array(attrs[name], dtype)
    return None


def iter_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    """Every node of ``graph`` and of its subgraphs (If/Loop/Scan bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from iter_nodes(g)
