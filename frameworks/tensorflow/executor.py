"""The TensorFlow graph executor: the ONNX graph converted to TF ops under ``tf.function``."""

from __future__ import annotations

import re
import time

import numpy as np
import tensorflow as tf

from deep500lite.errors import Deep500Error, FeedError, UnsupportedOperatorError, UserKeyError, UserTypeError
from deep500lite.lv1.compile_progress import compiling
from deep500lite.lv1.control_flow import subgraph_captures
from deep500lite.lv1.execution_errors import execution_error, shape_of
from deep500lite.lv1.executor import GraphExecutor
from deep500lite.lv1.network import FLOAT_DTYPES, iter_nodes, load_model
from deep500lite.frameworks.tensorflow.layout import Value
from deep500lite.frameworks.tensorflow import param_layout
from deep500lite.frameworks.tensorflow.dtypes import check_types
from deep500lite.frameworks.tensorflow.ops import SUPPORTED_OPS, TRAINING_STATE_OUTPUTS, build_node

__all__ = ["TensorFlowExecutor", "from_model", "from_onnx", "tf_device_name"]


def tf_device_name(device) -> str:
    """The TensorFlow device string of a deep500lite device (``"/CPU:0"``, ``"/GPU:N"``)."""
    return f"/GPU:{device.index}" if device.is_gpu else "/CPU:0"


def _inferred_shapes(network) -> dict:
    """ONNX shape inference's shapes (``None`` for unknown sizes) of the graph's tensors.

    Shape arithmetic that TensorFlow cannot trace through (a Reshape to a computed shape) leaves
    tensors of unknown rank, which converters that need the rank refuse; ONNX's own inference
    (with data propagation) often knows it. Applied with ``set_shape`` while tracing: no cost
    at run time.
    """
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(network.to_onnx(), data_prop=True)
    except Exception:  # noqa: BLE001 - a refinement only
        return {}
    shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if t is not None and t.HasField("shape"):
            shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return shapes


def _refined(value, shape):
    """``value`` with its tensor's static shape set from ONNX's where TensorFlow lost the rank."""
    if shape is not None and value.perm is None and value.tensor.shape.rank is None:
        try:
            value.tensor.set_shape(shape)
        except (ValueError, AttributeError):  # an eager tensor, or shapes that disagree: left as is
            pass
    return value


def _refuse_custom_nodes_under_xla(network) -> None:
    """Refuse a custom operator under XLA before anything is built: XLA cannot call back into Python or C."""
    for node in iter_nodes(network.graph):
        if node.domain not in ("", "ai.onnx"):
            raise UnsupportedOperatorError(
                f"tensorflow:xla cannot run the custom operator '{node.op_type}' (node '{node.name or node.output[0]}'):"
                " XLA compiles the whole function and has no kernel for a Python or C++ callback (tf.numpy_function); "
                "run it on tensorflow (without XLA), torch:compile or jax, which call it from compiled code. "
                f"Received: executor tensorflow:xla and domain {node.domain!r}")


class TensorFlowExecutor(GraphExecutor):
    """Runs a network as one ``tf.function`` built from the ONNX graph.

    The graph is converted once, when the executor is built (and again when operations or
    outputs are added to the network): every node becomes TensorFlow ops, channels-first
    spatial operators run channels-last (see :mod:`.layout`), and the function is traced once per
    family of input shapes (an input signature with ``None`` for dimensions the model leaves
    open). Floating-point initializers are ``tf.Variable`` objects on the executor's device, so
    ``feed_tensor`` assigns in place and TensorFlow's autodiff can reach them; other
    initializers (shapes, indices) are embedded as graph constants. Convolution filters are
    stored HWIO and the dense weights behind a Flatten of a channels-last tensor with their rows
    permuted (:mod:`.param_layout`), so no step transposes them; ``fetch_tensor``,
    ``feed_tensor`` and the gradients convert to and from the ONNX layout.

    Training (:meth:`inference_and_backprop`, and the native optimizers of
    :mod:`.optimizers`) runs a second conversion of the same graph in training mode:
    BatchNormalization normalizes with the batch statistics (biased variance) and assigns the new
    running statistics ``running * momentum + batch * (1 - momentum)`` to its mean and variance
    variables; Dropout draws its mask from a ``tf.random.Generator`` seeded with ``seed``. The
    forward pass runs under ``tf.GradientTape`` inside one ``tf.function`` (traced once per family
    of input shapes and per ``y``); gradients stay on the device as tensors until fetched.

    With ``jit_compile=True`` both functions are ``tf.function(jit_compile=True)``: XLA compiles
    the whole inference function, and the whole training function (forward, ``GradientTape``
    backward and the running-statistics updates), once per concrete input shape.

    :attr:`compile_seconds`: the first call of a function with a new concrete input shape is
    where TensorFlow traces it and XLA compiles it. That call is timed in two parts: tracing, by
    ``get_concrete_function`` (timed alone, before running); and, with ``jit_compile=True``, the
    XLA compilation, as the time of the first run minus the time of an immediate second run with
    the same feeds (the training function's state, the BatchNormalization running statistics
    and the Dropout generator, is saved before the first run and restored after it, so the
    second run is the one that counts). Without ``jit_compile`` only tracing is counted.

    Args:
        network: a Network, ONNX file path or ``onnx.ModelProto``.
        device: ``"cpu"`` or ``"gpu:N"``.
        seed: seed of the generator that training-mode Dropout draws its masks from.
        jit_compile: compile inference and training with XLA (``tf.function(jit_compile=True)``).
    """

    framework = "tensorflow"
    SUPPORTED_OPS = SUPPORTED_OPS

    def __init__(self, network, device=None, seed: int = 0, jit_compile: bool = False):
        if not isinstance(jit_compile, bool):
            raise UserTypeError(f"jit_compile must be True or False. Received: {jit_compile!r}")
        if jit_compile:
            network = load_model(network)
            _refuse_custom_nodes_under_xla(network)
        super().__init__(network, device)
        self._jit = jit_compile
        self.compile_seconds = 0.0
        self.options = {"jit_compile": jit_compile}
        self._compiled_shapes: set = set()  # (function id, feed shapes and dtypes) already compiled
        self._concrete: tuple = (None, {})  # (forward function, {feed signature: its concrete function})
        self._tfdev = tf_device_name(self.devname)
        self._variables: dict[str, tf.Variable] = {}
        self._constants: dict[str, np.ndarray] = {}
        self._grads: dict[str, tf.Tensor] = {}
        self._layouts: dict = {}  # parameter -> its storage layout (see param_layout); ONNX layout if absent
        self._grad_params: dict[str, str] = {}  # gradient name -> parameter name
        self.seed = seed
        with tf.device(self._tfdev):
            self._rng = tf.random.Generator.from_seed(seed)
        self._build_id = 0
        self._load_values(self.network.host_values())
        self._build()

    # ------------------------------------------------------------------ building
    def _load_values(self, values):
        with tf.device(self._tfdev):
            for name, value in values.items():
                value = np.asarray(value)
                if value.dtype in FLOAT_DTYPES:
                    self._variables[name] = tf.Variable(value, name=_var_name(name), trainable=True)
                else:
                    self._constants[name] = np.array(value, copy=True)

    def _build(self):
        network = self.network
        graph = network.graph
        opset = network.opset
        self._ranks = ranks = _inferred_shapes(network)
        flatten_nodes = self._choose_layouts(ranks)
        # a node's subgraphs (If, Loop, Scan) read outer values, passed after its declared inputs
        plan = [(build_node(node, opset), list(node.input) + subgraph_captures(node), list(node.output))
                for node in graph.node]
        _flatten_channels_last(plan, flatten_nodes)
        self._plan = plan  # also run node by node, eagerly, to locate a failure (_run_error)
        gpu = self.devname.is_gpu
        self._train_plan = [
            (build_node(node, opset, training=True, rng=self._rng, gpu=gpu), list(node.input) + subgraph_captures(node),
             list(node.output),
             [(node.input[i], k) for i, k in TRAINING_STATE_OUTPUTS.get(node.op_type, ())
              if i < len(node.input) and node.input[i] in self._variables])
            for node in graph.node]
        _flatten_channels_last(self._train_plan, flatten_nodes)
        self._train_fns: dict = {}
        self._grads = {}
        self._build_id += 1
        self._compiled_shapes = set()
        inputs = network.inputs
        outputs = network.outputs
        variables = self._variables
        constants = self._constants
        tfdev = self._tfdev
        used = {n for _, ins, _ in plan for n in ins} | set(network.outputs)
        used_vars = [n for n in variables if n in used]
        used_consts = [n for n in constants if n in used]

        def forward(*feeds):
            with tf.device(tfdev):
                env: dict[str, Value] = {name: self._param_value(name) for name in used_vars}
                env.update((name, Value(tf.constant(constants[name]))) for name in used_consts)
                env.update(zip(inputs, (Value(t) for t in feeds)))
                for i, (run, ins, outs) in enumerate(plan):
                    with tf.name_scope(_node_scope(i)):
                        results = run([env[n] if n else None for n in ins])
                    for name, value in zip(outs, results):
                        if name and value is not None:
                            env[name] = _refined(value, ranks.get(name))
                return [env[name].plain for name in outputs]

        self._inputs = inputs
        self._outputs = outputs
        self._fn = self._function(forward)

    def _choose_layouts(self, shapes) -> set:
        """Store each parameter in the layout :func:`.param_layout.plan` picks (HWIO filters, permuted
        dense weights after a Flatten), converting variables whose layout changes.

        Returns:
            The indices of the Flatten nodes that flatten channels-last.
        """
        network = self.network
        plain = {n: self._plain_shape(n) for n in self._variables}
        layouts, flatten_nodes = param_layout.plan(network.graph, plain, shapes, network.outputs)
        with tf.device(self._tfdev):
            for name, var in list(self._variables.items()):
                old, new = self._layouts.get(name), layouts.get(name)
                if old == new:
                    continue
                value = self._to_plain(name, var.numpy())
                stored = value if new is None else new.to_stored(value)
                if tuple(stored.shape) == tuple(var.shape):
                    var.assign(stored)
                else:
                    self._variables[name] = tf.Variable(stored, name=_var_name(name), trainable=True)
        self._layouts = layouts
        return flatten_nodes

    def _param_value(self, name) -> Value:
        """While tracing: the graph value of parameter ``name`` (its ``plain`` is the ONNX layout)."""
        layout = self._layouts.get(name)
        tensor = self._variables[name].read_value()
        return Value(tensor) if layout is None else layout.value(tensor)

    def _to_plain(self, name, stored: np.ndarray) -> np.ndarray:
        """The ONNX-layout value of parameter (or gradient of parameter) ``name`` stored as ``stored``."""
        layout = self._layouts.get(name)
        return stored if layout is None else layout.to_plain(stored)

    def _to_stored(self, name, plain: np.ndarray) -> np.ndarray:
        """The stored form of an ONNX-layout value of parameter ``name`` (or of its gradient)."""
        layout = self._layouts.get(name)
        return plain if layout is None else layout.to_stored(plain)

    def _plain_shape(self, name) -> tuple:
        """The ONNX shape of parameter ``name``."""
        shape = tuple(self._variables[name].shape)
        layout = self._layouts.get(name)
        return shape if layout is None else layout.plain_shape(shape)

    def _function(self, fn):
        """``tf.function(fn)`` traced once per family of input shapes (fn takes the feeds in input order)."""
        descs = self.network.input_descriptors()
        jit = {"jit_compile": True} if self._jit else {}
        if all(d is not None for d in descs.values()):
            signature = [tf.TensorSpec(None if d.shape is None else list(d.shape), tf.as_dtype(d.dtype), name=None)
                         for d in descs.values()]
            return tf.function(fn, input_signature=signature, autograph=False, **jit)
        return tf.function(fn, reduce_retracing=True, autograph=False, **jit)

    def _call(self, fn, args, training: bool):
        """``fn(*args)``; the first call per concrete input shape adds its compile time (see the class docs)."""
        key = (id(fn), tuple((np.shape(a), np.asarray(a).dtype.str) for a in args))
        if key in self._compiled_shapes:
            return fn(*args)
        if self._jit:
            what = "the training function" if training else "the inference function"
            with compiling(self, what, [np.shape(a) for a in args], "XLA, jit_compile=True"):
                return self._first_call(fn, args, training, key)
        return self._first_call(fn, args, training, key)

    def _first_call(self, fn, args, training: bool, key):
        """The first call of ``fn`` for a concrete input shape, its tracing and compilation timed (see the class docs)."""
        t0 = time.perf_counter()
        fn.get_concrete_function(*args)  # traces, or finds the trace of this shape family
        spent = time.perf_counter() - t0
        if self._jit:
            state = self._training_state() if training else None
            t0 = time.perf_counter()
            _materialized(fn(*args))
            first = time.perf_counter() - t0
            if state is not None:
                for var, value in state:
                    var.assign(value)
            t0 = time.perf_counter()
            results = _materialized(fn(*args))
            spent += max(0.0, first - (time.perf_counter() - t0))
        else:
            results = fn(*args)
        self.compile_seconds += spent
        self._compiled_shapes.add(key)
        return results

    def is_compiled(self) -> bool:
        """True with ``jit_compile=True`` (XLA compiles on the first call per input shape)."""
        return self._jit

    def _random_state(self):
        return self._rng.state.numpy()

    def _restore_random_state(self, state) -> None:
        self._rng.state.assign(state)

    def _training_state(self) -> list:
        """``(variable, value)`` of the state a training run changes: running statistics, the Dropout generator."""
        names = {var_name for _, _, _, state in self._train_plan for var_name, _ in state}
        saved = [(self._variables[n], tf.identity(self._variables[n])) for n in names]
        return saved + [(self._rng.state, tf.identity(self._rng.state))]

    def _training_forward(self, feeds, extra=()):
        """The training-mode forward pass, for use while tracing (under a tape).

        Assigns the new BatchNormalization running statistics to their variables.

        Args:
            feeds: the input tensors, in ``network.inputs`` order.
            extra: names of further tensors to return (the loss ``y``, when it is no output).

        Returns:
            ``(outputs, extras)``: lists of tensors in the ONNX layout.
        """
        variables = self._variables
        constants = self._constants
        used = {n for _, ins, _, _ in self._train_plan for n in ins} | set(self._outputs)
        with tf.device(self._tfdev):
            env: dict[str, Value] = {n: self._param_value(n) for n in variables if n in used}
            env.update((n, Value(tf.constant(c))) for n, c in constants.items() if n in used)
            env.update(zip(self._inputs, (Value(t) for t in feeds)))
            updates = []
            ranks = self._ranks
            for i, (run, ins, outs, state) in enumerate(self._train_plan):
                with tf.name_scope(_node_scope(i)):
                    results = run([env[n] if n else None for n in ins])
                for name, value in zip(outs, results):
                    if name and value is not None:
                        env[name] = _refined(value, ranks.get(name))
                for var_name, k in state:
                    updates.append((var_name, results[k].plain))
            for var_name, value in updates:
                variables[var_name].assign(tf.cast(value, variables[var_name].dtype))
            return [env[n].plain for n in self._outputs], [env[n].plain for n in extra]

    def _gradient_variables(self, y):
        """The ``(param, gradient name)`` pairs of ``network.gradient(y)`` and their variables."""
        pairs = [(p, g) for p, g in self.network.gradient(y) if p in self._variables]
        self._grad_params.update((g, p) for p, g in pairs)
        return pairs, [self._variables[p] for p, _ in pairs]

    def _forward_and_gradients(self, feeds, y, variables):
        """While tracing: the training forward pass, the scalar ``y`` and its gradients (zeros for
        unconnected variables), as ``(outputs, y, gradients)``."""
        with tf.GradientTape() as tape:
            outs, (loss,) = self._training_forward(feeds, [y])
        _check_scalar(y, loss)
        grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        with tf.device(self._tfdev):
            return outs, loss, [tf.convert_to_tensor(g) for g in grads]

    def _backprop_function(self, y):
        entry = self._train_fns.get(y)
        if entry is not None:
            return entry
        pairs, variables = self._gradient_variables(y)

        def backprop(*feeds):
            return self._forward_and_gradients(feeds, y, variables)

        entry = (self._function(backprop), [g for _, g in pairs])
        self._train_fns[y] = entry
        return entry

    def _network_changed(self):
        super()._network_changed()
        # New nodes may read initializers the executor has not seen (add_operation with params).
        self._load_values({k: v for k, v in self.network.host_values().items()
                           if k not in self._variables and k not in self._constants})
        self._build()

    @classmethod
    def supports_custom_domain(cls, domain: str) -> bool:
        """Any domain: registered custom operators run through ``tf.custom_gradient``."""
        return True

    @classmethod
    def check_supported(cls, network):
        """Also refuse tensors of types TensorFlow lacks (float8, int4, sequences...), naming them."""
        super().check_supported(network)
        check_types(network)

    # ------------------------------------------------------------------ running
    def inference(self, feeds):
        """Run the network forward (see :meth:`GraphExecutor.inference`).

        Outputs are copied to numpy arrays, which waits for the computation to finish.
        """
        feeds = self.network.check_feeds(feeds)
        args = [feeds[name] for name in self._inputs]
        try:
            results = self._inference_call(args)
        except Exception as exc:  # noqa: BLE001 - reported as an ExecutionError naming the node
            error = self._run_error(exc, feeds, training=False)
        else:
            return {name: r.numpy() for name, r in zip(self._outputs, results)}
        raise error  # outside the except block: the error keeps no frame of the failed run alive

    def _inference_call(self, args):
        """The forward function on ``args``, through its concrete function once one is traced.

        Calling a ``tf.function`` looks up its trace from the arguments on every call; the first
        call per feed signature goes through :meth:`_call` (which traces and counts the compile
        time), later ones call the concrete function of that signature directly. Under XLA every
        call goes through :meth:`_call`.
        """
        fn = self._fn
        cache = self._concrete
        if cache[0] is not fn:
            cache = self._concrete = (fn, {})
        key = tuple([(a.shape, a.dtype) if type(a) is np.ndarray else None for a in args])
        concrete = cache[1].get(key)
        if concrete is not None:
            return concrete(*args)
        results = self._call(fn, args, training=False)
        if not self._jit and None not in key:
            cache[1][key] = fn.get_concrete_function(*args)
        return results

    def _run_error(self, exc, feeds, training: bool, y=None):
        """The :class:`ExecutionError` for a failed run of the (training) function.

        The converted graph keeps no per-node bookkeeping, so only now, after the failure, is it
        run again eagerly node by node with the same feeds: the first node that raises is the
        one reported, with its input shapes. For the training graph, when the forward pass runs,
        each node that leads to ``y`` is then differentiated on its own, last node first, as
        the backward pass would meet them. A failure that happens only in the graph (a kernel
        TensorFlow's graph optimizer chose, XLA) is found by name instead: every node's ops are
        traced in a name scope of its own (:func:`_node_scope`), which TensorFlow's message
        names (``gradient_tape/d5node3/Conv2DBackpropInput``).
        """
        if isinstance(exc, Deep500Error):
            return exc
        try:
            node, shapes = self._locate_failure(exc, feeds, training, y)
        except Exception:  # noqa: BLE001 - the diagnosis must not hide the error it diagnoses
            node = shapes = None
        return execution_error("tensorflow", exc, node, shapes, "training graph" if training else None)

    def _locate_failure(self, exc, feeds, training: bool, y=None):
        """``(node, input shapes)`` of the node that failed, or ``(None, None)`` (see :meth:`_run_error`)."""
        nodes = self.network.graph.node
        plan = self._train_plan if training else self._plan
        backward = _nodes_leading_to(nodes, y) if training else set()
        state = self._training_state() if training else []  # restored after: the rerun must not advance Dropout
        inputs = {}  # node index -> its input Values, for the nodes reached
        try:
            with tf.device(self._tfdev):
                env: dict[str, Value] = {n: self._param_value(n) for n in self._variables}
                env.update((n, Value(tf.constant(c))) for n, c in self._constants.items())
                env.update((n, Value(tf.convert_to_tensor(feeds[n]))) for n in self._inputs)
                for i, (run, ins, outs, *_) in enumerate(plan):
                    args = inputs[i] = [env.get(n) if n else None for n in ins]
                    try:
                        results = run(args)
                    except Exception:  # noqa: BLE001 - this is the failing node
                        return nodes[i], _input_shapes(ins, args)
                    for name, value in zip(outs, results):
                        if name and value is not None:
                            env[name] = value
                for i in sorted(backward, reverse=True):
                    try:
                        _run_and_differentiate(plan[i][0], inputs[i])
                    except Exception:  # noqa: BLE001 - this node's gradient is what fails
                        return nodes[i], _input_shapes(plan[i][1], inputs[i])
        finally:
            for var, value in state:
                var.assign(value)
        named = _scoped_node(exc, len(nodes))
        if named is None:
            return None, None
        return nodes[named], _input_shapes(plan[named][1], inputs[named]) if named in inputs else None

    def inference_and_backprop(self, feeds, y="loss"):
        """Run forward in training mode, then backward from the scalar ``y`` (see the class docs).

        Returns:
            The graph outputs (computed in training mode). Gradients stay on the device until read
            with ``network.fetch_tensors(["<param>_grad", ...])``.

        Raises:
            FeedError: the feeds do not match the network's inputs, or ``y`` is not a scalar.
            ModelError: ``y`` is not a tensor of the network.
        """
        feeds = self.network.check_feeds(feeds)
        fn, grad_names = self._backprop_function(y)
        try:
            outs, loss, grads = self._call(fn, [feeds[name] for name in self._inputs], training=True)
        except Exception as exc:  # noqa: BLE001 - reported as an ExecutionError naming the node
            error = self._run_error(exc, feeds, training=True, y=y)
        else:
            error = None
        if error is not None:
            raise error
        _check_scalar(y, loss)
        self._grads = dict(zip(grad_names, grads))
        return {name: r.numpy() for name, r in zip(self._outputs, outs)}

    def synchronize(self):
        """Nothing to wait for: every output is materialised as a numpy array before it is returned."""

    @classmethod
    def supports_device(cls, device):
        """CPU always; ``gpu:N`` when TensorFlow lists at least N + 1 GPUs."""
        if not device.is_gpu:
            return True
        return device.index < len(tf.config.list_physical_devices("GPU"))

    @classmethod
    def device_unavailable_reason(cls, device):
        """Why a GPU cannot be used (the GPUs TensorFlow sees)."""
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            return ("tf.config.list_physical_devices('GPU') is empty on this machine (tensorflow-cpu, "
                    "or no CUDA device); use device='cpu'.")
        return f"TensorFlow sees {len(gpus)} GPU(s) (gpu:0 to gpu:{len(gpus) - 1})."

    # ------------------------------------------------------------------ tensors
    def has_tensor(self, name):
        return name in self._variables or name in self._constants or name in self._grads

    def fetch_tensor(self, name):
        if name in self._variables:
            return self._to_plain(name, self._variables[name].numpy())
        if name in self._grads:
            return self._to_plain(self._grad_params.get(name), self._grads[name].numpy())
        if name not in self._constants:
            raise UserKeyError(f"The tensorflow executor holds no tensor '{name}'. Parameters: "
                               f"{sorted(self._variables)[:20]}; gradients ('<param>_grad') exist after "
                               f"inference_and_backprop. Received: {name!r}")
        return np.array(self._constants[name], copy=True)

    def feed_tensor(self, name, value):
        value = np.asarray(value)
        old = self._variables.get(name)
        if old is None and name in self._constants:
            old_value = self._constants[name]
            _check_same(name, old_value.dtype, old_value.shape, value)
            # Constants are embedded in the traced graph: rebuild the function.
            self._constants[name] = np.array(value, copy=True)
            self._build()
            return
        if old is None:
            raise UserKeyError(f"feed_tensor: the tensorflow executor holds no tensor '{name}'. "
                               f"Parameters: {sorted(self._variables)[:20]}. Received: {name!r}")
        _check_same(name, np.dtype(old.dtype.as_numpy_dtype), self._plain_shape(name), value)
        old.assign(self._to_stored(name, value))

    def device_peak_memory(self, reset: bool = False) -> int | None:
        """``tf.config.experimental.get_memory_info(...)["peak"]`` on the executor's GPU (None on the CPU).

        ``reset=True`` calls ``tf.config.experimental.reset_memory_stats`` and returns None.
        """
        device = self.devname
        if device is None or not getattr(device, "is_gpu", False):
            return None
        name = f"GPU:{device.index}"
        if reset:
            tf.config.experimental.reset_memory_stats(name)
            return None
        return int(tf.config.experimental.get_memory_info(name)["peak"])


def _materialized(results):
    """``results`` after every tensor in it has been computed (so that timing it is honest)."""
    for t in tf.nest.flatten(results):
        if hasattr(t, "numpy"):
            t.numpy()
    return results


def _check_scalar(y, loss):
    """Refuse a ``y`` that is not a floating-point scalar (while tracing, where the shape is static)."""
    n = loss.shape.num_elements()
    if n is not None and n != 1:
        raise FeedError(f"inference_and_backprop: y='{y}' must be a scalar (one element). "
                        f"Received: a tensor of shape {loss.shape.as_list()}")
    if not loss.dtype.is_floating:
        raise FeedError(f"inference_and_backprop: y='{y}' must be a floating-point tensor. "
                        f"Received: {loss.dtype.name}")


_SCOPE_PREFIX = "d5node"
# A node's scope in an op name of a failure message; TensorFlow appends "_1" to a scope opened twice.
_SCOPE_IN_MESSAGE = re.compile(rf"(?:^|[\s/{{'\"]){_SCOPE_PREFIX}(\d+)(?:_\d+)?/")


def _node_scope(index: int) -> str:
    """The name scope the ops of node ``index`` are traced in (it names them in TensorFlow's messages)."""
    return f"{_SCOPE_PREFIX}{index}"


def _scoped_node(exc, n_nodes: int) -> int | None:
    """The index of the node whose scope TensorFlow's message names first, or None."""
    text = str(getattr(exc, "message", None) or exc)
    for match in _SCOPE_IN_MESSAGE.finditer(text):
        index = int(match.group(1))
        if index < n_nodes:
            return index
    return None


def _nodes_leading_to(nodes, y) -> set:
    """The indices of the nodes whose outputs ``y`` depends on (the ones the training step differentiates)."""
    needed = {y}
    found = set()
    for i in range(len(nodes) - 1, -1, -1):
        if any(o and o in needed for o in nodes[i].output):
            found.add(i)
            needed.update(n for n in nodes[i].input if n)
    return found


def _input_shapes(names, args) -> list:
    """The shapes of a node's input Values (``"absent"`` for an omitted input, None for an unknown one)."""
    return ["absent" if not n else None if a is None else shape_of(a.plain) for n, a in zip(names, args)]


def _run_and_differentiate(run, args):
    """``run(args)`` eagerly under a tape, then the gradient of its floating-point outputs with respect
    to its floating-point inputs (an upstream gradient of ones): raises where the node's backward fails."""
    fresh = [None if a is None else Value(a.tensor, a.perm) for a in args]  # no transposes cached off the tape
    sources = [a.tensor for a in fresh if a is not None and a.tensor.dtype.is_floating]
    with tf.GradientTape() as tape:
        tape.watch(sources)
        results = run(fresh)
    targets = [v.tensor for v in results if v is not None and v.tensor.dtype.is_floating]
    if sources and targets:
        tape.gradient(targets, sources, output_gradients=[tf.ones_like(t) for t in targets])
    return results


def _flatten_channels_last(plan, indices):
    """Replace the converters of the Flatten nodes ``indices`` of ``plan`` by one that flattens the
    channels-last tensor (the dense weights that read it are stored to match, see :mod:`.param_layout`)."""
    for i in indices:
        entry = plan[i]

        def run(values):
            x = values[0].channels_last
            return [Value(tf.reshape(x, [-1, int(np.prod(x.shape.as_list()[1:]))]))]

        plan[i] = (run,) + tuple(entry[1:])


def _check_same(name, dtype, shape, value):
    if value.dtype != dtype or tuple(value.shape) != tuple(shape):
        raise FeedError(
            f"feed_tensor('{name}'): expected {np.dtype(dtype).name}{list(shape)}. "
            f"Received: {value.dtype.name}{list(value.shape)}"
        )


def _var_name(name: str) -> str:
    # TensorFlow variable names may not contain every character ONNX names may.
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "param"


def from_model(network, device=None, seed: int = 0, jit_compile: bool = False) -> TensorFlowExecutor:
    """Build a :class:`TensorFlowExecutor` for a Network, ONNX file or ModelProto on ``device``.

    ``jit_compile=True`` compiles it with XLA (see :class:`TensorFlowExecutor`).
    """
    return TensorFlowExecutor(network, device, seed=seed, jit_compile=jit_compile)


def from_onnx(onnx_file, device=None, **kwargs) -> TensorFlowExecutor:
    """Deep500's ``from_onnx``: read an ONNX file with ``d5.parser.load_and_parse_model``, then :func:`from_model`."""
    from deep500lite.lv1.parser import load_and_parse_model

    return from_model(load_and_parse_model(onnx_file), device, **kwargs)
