"""The JAX graph executor: an ONNX graph traced into one JAX function and compiled with XLA."""

from __future__ import annotations

import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from deep500lite.errors import Deep500Error, FeedError, ModelError, UserError, UserKeyError, UserTypeError
from deep500lite.lv1.device import Device
from deep500lite.lv1.compile_progress import compiling
from deep500lite.lv1.control_flow import subgraph_captures
from deep500lite.lv1.execution_errors import execution_error, shape_of
from deep500lite.lv1.executor import GraphExecutor
from deep500lite.lv1.network import FLOAT_DTYPES
from deep500lite.frameworks.jax.dtypes import host_array, to_jax, to_numpy
from deep500lite.frameworks.jax.ops import SUPPORTED_OPS, NodeContext, is_static, lookup, parse_attributes

__all__ = ["JaxExecutor", "from_model", "from_onnx", "jax_device", "CPU_COMPILER_OPTIONS"]

# Float initializers read only at these input positions (Resize's scales, Range's bounds, Dropout's
# ratio) must be known while tracing: they are kept as constants instead of traced parameters.
_STATIC_FLOAT_INPUTS = {("Resize", 1), ("Resize", 2), ("Upsample", 1), ("Dropout", 1), ("Range", 0), ("Range", 1),
                        ("Range", 2)}
_MATMUL_PRECISIONS = ("default", "high", "highest")
# NodeContext.static's message when a converter needs a value known while tracing.
_CONSTANT_NEEDED = "which needs its"
_CONCRETIZATION_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError,
                          jax.errors.TracerArrayConversionError, jax.errors.NonConcreteBooleanIndexError)
# How many network inputs become trace constants: none, the non-float ones, all of them.
_STATIC_LEVELS = 3

#: XLA options the executor compiles with on the CPU unless given others: none, XLA's defaults.
#: ``{"xla_cpu_use_fusion_emitters": False}`` (XLA's LLVM IR emitters) compiles the zoo's CNN
#: training steps in a third less time (RepVGG: 30 against 47 CPU seconds), but casts to the
#: float8 FNUZ types differently (NaN where ONNX gives 0), so it is an opt-in, not the default.
CPU_COMPILER_OPTIONS: dict = {}


def _gpus() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def jax_device(device: Device):
    """The ``jax.Device`` for a deep500lite :class:`~deep500lite.Device`."""
    return _gpus()[device.index] if device.is_gpu else jax.devices("cpu")[0]


def _signature(arrays) -> tuple:
    return tuple((tuple(a.shape), str(a.dtype)) for a in arrays)


def _compile_description(cache_key: tuple) -> tuple[str, list]:
    """What a compile cache key compiles, in words, and its feeds' shapes (for the progress line)."""
    kind = cache_key[0][0] if cache_key and isinstance(cache_key[0], tuple) and cache_key[0] else None
    what = {"infer": "the inference function", "train": "the training function",
            "step": "the training step"}.get(kind, "a function")
    try:
        shapes = [tuple(shape) for shape, _ in cache_key[1]]
    except (IndexError, TypeError, ValueError):
        shapes = []
    return what, shapes


# Indexing ops whose indices (input 1) XLA clamps or fills when out of range instead of failing;
# indices fed as network inputs (token ids, say) are checked on the host before each call.
_INDEXING = ("Gather", "GatherElements")


def _index_check(node, attrs: dict, data, indices, training: bool) -> tuple:
    """``(node, indices input, axis size, input shapes, where)`` for :meth:`JaxExecutor._check_indices`."""
    axis = int(attrs.get("axis", 0))
    size = int(data.shape[axis]) if -len(data.shape) <= axis < len(data.shape) else 0
    return (node, node.input[1], size, [shape_of(data), shape_of(indices)], "training graph" if training else None)


class JaxExecutor(GraphExecutor):
    """Runs a network with JAX on the CPU or a GPU, compiled with XLA by ``jax.jit``.

    The ONNX graph becomes one Python function of ``(params, inputs[, step])`` that walks the
    nodes and calls one converter per node (see :mod:`deep500lite.frameworks.jax.ops`). Nodes
    whose inputs are all known while tracing (``Constant``, integer initializers, ``Shape`` of any
    array and what is computed from these) run under ``jax.ensure_compile_time_eval()`` and stay
    numpy arrays, so shape arithmetic folds away before XLA sees the graph. That function is
    compiled with ``jax.jit(...).lower(...).compile()`` once per input signature (shapes and
    dtypes of the feeds); the seconds spent tracing and compiling add up in
    :attr:`compile_seconds`, and later calls with the same signature reuse the executable.

    Floating-point initializers (the parameters) live as JAX arrays on the device between calls
    and are arguments of the compiled function, so :meth:`feed_tensor` and the optimizers replace
    them without recompiling. Other initializers (shapes, indices) are constants of the trace:
    feeding one rebuilds (and recompiles). A network input that fixes a shape (a ``Reshape``
    target fed at run time) cannot be traced: the graph is then traced again with the integer
    inputs (then all inputs) as constants, and one executable is cached per fed value.

    Args:
        network: a Network, an ONNX file or an ``onnx.ModelProto``.
        device: ``None``/``"cpu"`` or ``"gpu:N"`` (the N-th device of ``jax.devices("gpu")``).
        seed: the seed training-mode ``Dropout`` keys derive from (``fold_in(PRNGKey(seed), step)``).
        jit: False runs the same function eagerly, op by op, for debugging (nothing is compiled).
        matmul_precision: ``jax.default_matmul_precision`` while tracing: "highest" (default; float32
            matrix products and convolutions in full float32, no TF32 on GPUs), "high" or "default".
        compiler_options: XLA compile options (``jax.stages.Lowered.compile(compiler_options=...)``);
            None: :data:`CPU_COMPILER_OPTIONS` on the CPU, none on a GPU. Options this jaxlib does
            not know are dropped (then ``options`` lists none).

    Attributes:
        compile_seconds: wall seconds spent tracing and compiling so far.
        options: ``{"jit": ..., "platform": "cpu"|"gpu", "matmul_precision": ..., "compiler_options": ...}``,
            and ``"eager"`` (why) once a graph had to run op by op: an output shape that depends on
            the values (``NonMaxSuppression``, a loop with scan outputs and a run-time trip count)
            cannot be compiled by XLA, so that graph runs without ``jax.jit`` (see
            :mod:`deep500lite.frameworks.jax.ops.control`).
    """

    framework = "jax"
    SUPPORTED_OPS = SUPPORTED_OPS

    def __init__(self, network, device=None, seed: int = 0, jit: bool = True, matmul_precision: str = "highest",
                 compiler_options: dict | None = None):
        if compiler_options is not None and not isinstance(compiler_options, dict):
            raise UserTypeError(f"compiler_options must be a dict of XLA options. Received: {compiler_options!r}")
        if matmul_precision not in _MATMUL_PRECISIONS:
            raise UserError(f"matmul_precision must be one of {list(_MATMUL_PRECISIONS)}. "
                            f"Received: {matmul_precision!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise UserTypeError(f"seed must be an integer. Received: {seed!r}")
        super().__init__(network, device)
        self.compile_seconds = 0.0
        self._device = jax_device(self.devname)
        self.options = {"jit": bool(jit), "platform": "gpu" if self.devname.is_gpu else "cpu",
                        "matmul_precision": matmul_precision}
        if compiler_options is None:
            compiler_options = {} if self.devname.is_gpu else dict(CPU_COMPILER_OPTIONS)
        self._compiler_options = dict(compiler_options)
        if compiler_options:
            self.options["compiler_options"] = dict(compiler_options)
        self._seed = int(seed)
        self._step = 0
        self._params: dict[str, jax.Array] = {}
        self._grads: dict[str, jax.Array] = {}      # gradient name -> gradient (after backprop)
        self._grad_names: dict[str, str] = {}       # gradient name -> parameter name
        self._build()

    # -------------------------------------------------------------- devices
    @classmethod
    def supports_device(cls, device: Device) -> bool:
        """The CPU always; ``gpu:N`` when JAX has a GPU backend with a device N."""
        return not device.is_gpu or device.index < len(_gpus())

    @classmethod
    def device_unavailable_reason(cls, device: Device) -> str:
        """Why ``device`` cannot be used on this machine."""
        n = len(_gpus())
        if n == 0:
            return (f"JAX {jax.__version__} has no GPU backend on this machine (jax.devices('gpu') is empty; "
                    "install jax[cuda12] on a CUDA machine); use device='cpu'.")
        return f"JAX sees {n} GPU(s); use gpu:0 to gpu:{n - 1} or cpu."

    @classmethod
    def supports_custom_domain(cls, domain: str) -> bool:
        """Any domain: registered custom operators run on the host through ``jax.pure_callback``
        (see :mod:`deep500lite.frameworks.jax.custom`), differentiable through their ``backward``."""
        return True

    def synchronize(self) -> None:
        """Wait until the parameters' pending updates are computed (JAX dispatches asynchronously)."""
        for value in list(self._params.values()) + list(self._grads.values()):
            value.block_until_ready()

    # -------------------------------------------------------------- building
    def _build(self) -> None:
        net = self.network
        host = net.host_values()
        static_floats = set()
        uses: dict[str, list] = {}
        for node in net.graph.node:
            for i, name in enumerate(node.input):
                if name:
                    uses.setdefault(name, []).append((node.op_type, i))
        self._consts: dict[str, np.ndarray] = {}
        for name in net.initializers:
            value = host[name]
            is_float = value.dtype in FLOAT_DTYPES
            if is_float and uses.get(name) and all(u in _STATIC_FLOAT_INPUTS for u in uses[name]):
                static_floats.add(name)
            if not is_float or name in static_floats:
                self._consts[name] = np.array(value, copy=True)
                self._params.pop(name, None)
            elif name not in self._params:
                self._params[name] = to_jax(value, self._device)
        for name in list(self._params):
            if name not in host:
                del self._params[name]
        self._nodes = list(net.graph.node)
        self._attrs = [parse_attributes(node) for node in self._nodes]
        # the outer values each node's subgraphs (If, Loop, Scan) read; the converters find them in ctx.outer
        self._captures = [subgraph_captures(node) for node in self._nodes]
        self._custom = {k: _custom_converter(node) for k, node in enumerate(self._nodes)
                        if node.domain not in ("", "ai.onnx")}
        self._opset = net.opset
        self._compiled: dict[tuple, Callable] = {}
        self._const_params: set[str] = set()  # parameters that are constants of the traces
        self._splits: dict[str, tuple] = {}  # y -> (network version, _gradient_split(y))
        self._checks: dict[tuple, list] = {}  # cache key -> Gather indices fed as inputs, checked on the host
        self._index_checks: list = []
        self._levels: dict[tuple, int] = {}  # (kind, feed signature) -> how many inputs are trace constants
        self._grads, self._grad_names = {}, {}
        self._built_version = net.version
        missing = [o for o in net.outputs if o not in set(net.inputs) | set(net.initializers)
                   and not any(o in n.output for n in self._nodes)]
        if missing:
            raise ModelError(f"The network's output(s) {missing} are produced by no node and are no input; every "
                             f"output must come from a node, an input or an initializer. "
                             f"Received: outputs {list(net.outputs)}")

    def is_compiled(self) -> bool:
        """True with ``jit=True`` (the default: ``jax.jit`` compiles once per feed signature)."""
        return bool(self.options["jit"])

    def _random_state(self):
        return self._step

    def _restore_random_state(self, state) -> None:
        self._step = state

    def _network_changed(self) -> None:
        super()._network_changed()
        self._build()

    # ---------------------------------------------------------------- trace
    def _forward(self, params: dict, inputs: dict, step=None, y: str | None = None):
        """The graph as a JAX computation: ``(outputs, y value or None, running-stat updates)``.

        Called while ``jax.jit`` traces (or eagerly with ``jit=False``). ``step`` given means the
        training trace: ``Dropout`` keys are ``fold_in(PRNGKey(seed), step)`` folded with the
        node's index, ``BatchNormalization`` records its running statistics with ``ctx.assign``.
        """
        training = step is not None
        key = jax.random.fold_in(jax.random.PRNGKey(self._seed), step) if training else None
        env: dict[str, object] = dict(self._consts)
        env.update(params)
        # Initializers a converter needs while tracing (a Range start Cast from a float scalar, say).
        env.update({n: np.asarray(self._params[n]) for n in self._const_params if n in params})
        env.update(inputs)
        updates: dict[str, object] = {}
        for k, (node, attrs) in enumerate(zip(self._nodes, self._attrs)):
            args = []
            for name in node.input:
                if not name:
                    args.append(None)
                elif name in env:
                    args.append(env[name])
                else:
                    raise ModelError(f"Node '{node.name or node.output[0]}' ({node.op_type}) reads '{name}', which "
                                     f"no earlier node, input or initializer provides (nodes must be in "
                                     f"topological order). Received: inputs {list(node.input)}")
            while args and args[-1] is None:
                args.pop()

            def assign(index, value, _node=node):
                name = _node.input[index] if index < len(_node.input) else ""
                if training and name in params:
                    updates[name] = jax.lax.stop_gradient(value)

            ctx = NodeContext(node, self._opset, attrs, training=training, key=key, index=k, assign=assign)
            ctx.args = tuple(args)
            ctx.outer = {name: env[name] for name in self._captures[k]}
            if node.op_type in _INDEXING and len(args) > 1 and node.input[1] in self.network.inputs \
                    and args[0] is not None and not is_static(args[1]):
                self._index_checks.append(_index_check(node, attrs, args[0], args[1], training))
            error = None
            try:
                fn = self._custom.get(k) or lookup(node.op_type, ctx.name)
                if all(a is None or is_static(a) for a in list(args) + list(ctx.outer.values())) and \
                        k not in self._custom and not (
                        training and node.op_type in ("Dropout", "BatchNormalization")):
                    with jax.ensure_compile_time_eval():
                        result = fn(ctx, *args)
                    folded = True
                else:
                    result = fn(ctx, *args)
                    folded = False
            except ModelError as exc:
                if _CONSTANT_NEEDED in str(exc):
                    exc.needs_constant = True
                    index = getattr(exc, "input_index", None)
                    # a node of an If/Loop/Scan body counts its own inputs, not this node's
                    if index is not None and getattr(exc, "node_name", ctx.name) == ctx.name:
                        exc.constant_params = self._initializer_ancestors(node.input[index]) - self._const_params
                raise
            except Deep500Error:
                raise
            except _CONCRETIZATION_ERRORS as exc:
                error = ModelError(f"The jax executor compiles node '{ctx.name}' ({node.op_type}) with XLA, "
                                   f"{_CONSTANT_NEEDED} an input value here, and it is computed from the network's "
                                   f"inputs or parameters. Received: {type(exc).__name__}")
                error.needs_constant = True
                raise error from None
            except Exception as exc:  # noqa: BLE001 - reported as an ExecutionError naming the node
                error = execution_error("jax", exc, node, [shape_of(a) if a is not None else "absent" for a in args]
                                        + ["absent"] * (len(node.input) - len(args)),
                                        "training graph" if training else None)
            if error is not None:
                raise error  # outside the except block: the error keeps no frame of the failed trace alive
            results = result if isinstance(result, (tuple, list)) else (result,)
            for out, value in zip(node.output, results):
                if out and value is not None:
                    env[out] = np.asarray(value) if folded else value
        outs = [env[o] for o in self.network.outputs]
        return outs, (env[y] if y is not None else None), updates

    def _compile(self, cache_key: tuple, fn: Callable, args: tuple, donate: tuple = ()) -> Callable:
        """``fn`` compiled for ``args``' shapes (cached under ``cache_key``), timing the compilation.

        ``donate``: positions of arguments whose buffers the executable may reuse for its results
        (``jax.jit(donate_argnums=)``); the caller must drop those arrays after the call.
        """
        compiled = self._compiled.get(cache_key)
        if compiled is not None:
            return compiled
        if not self.options["jit"]:
            compiled = self._compiled[cache_key] = fn
            return compiled
        start = time.perf_counter()
        self._index_checks = []
        error = None
        what, shapes = _compile_description(cache_key)
        with compiling(self, what, shapes, "jax.jit, XLA"):
            try:
                with jax.default_matmul_precision(self.options["matmul_precision"]):
                    lowered = jax.jit(fn, donate_argnums=donate).lower(*args)
                compiled = self._compile_lowered(lowered)
            except ModelError as exc:
                why = getattr(exc, "needs_eager", None)
                if why is None:
                    raise
                # an output shape that depends on the values: this graph runs op by op, without XLA
                self.options["eager"] = why
                compiled = fn
            except Deep500Error:
                raise
            except Exception as exc:  # noqa: BLE001 - XLA refusing to compile a node's attributes
                error = execution_error("jax", exc)
            finally:
                self.compile_seconds += time.perf_counter() - start
        if error is not None:
            raise error
        self._compiled[cache_key] = compiled
        self._checks[cache_key] = self._index_checks
        return compiled

    def _compile_lowered(self, lowered):
        """XLA's executable for ``lowered``, with :attr:`_compiler_options` where this jaxlib has them."""
        if self._compiler_options:
            try:
                return lowered.compile(compiler_options=self._compiler_options)
            except Exception as exc:  # noqa: BLE001 - an option this XLA lacks: compile with its defaults
                if "compile option" not in str(exc):
                    raise
                self._compiler_options = {}
                self.options.pop("compiler_options", None)
        return lowered.compile()

    def _check_indices(self, cache_key: tuple, host: dict) -> None:
        """Refuse fed indices that are out of range for the Gather they feed (XLA would clamp them silently).

        Raises:
            ExecutionError: an index fed as a network input is outside ``[-n, n)`` for its
                node's axis of size ``n``; names the node, as a failing framework kernel would.
        """
        for node, name, size, shapes, where in self._checks.get(cache_key, ()):
            idx = np.asarray(host[name])
            bad = idx[(idx < -size) | (idx >= size)]
            if bad.size:
                cause = IndexError(f"index {int(bad.flat[0])} is out of range: {node.op_type} indices along an axis "
                                   f"of size {size} must be in [{-size}, {size - 1}]")
                raise execution_error("jax", cause, node, shapes, where)

    def _call(self, fn: Callable, args: tuple, where: str | None):
        """Run a compiled function; a failure inside XLA becomes an :class:`ExecutionError`."""
        try:
            if self.options["jit"]:
                return fn(*args)
            with jax.default_matmul_precision(self.options["matmul_precision"]):
                return fn(*args)
        except Deep500Error:
            raise
        except Exception as exc:  # noqa: BLE001 - XLA does not say which ONNX node failed
            error = execution_error("jax", exc, where=where)
        raise error

    def _check_version(self) -> None:
        if self._built_version != self.network.version:
            self._build()

    def _static_inputs(self, host: dict, level: int) -> list[str]:
        names = self.network.inputs
        if level == 0:
            return []
        if level == 1:
            return [n for n in names if np.asarray(host[n]).dtype not in FLOAT_DTYPES]
        return list(names)

    def _execute(self, kind: tuple, feeds: dict, make: Callable, before: tuple, where: str | None,
                 donate: tuple = ()):
        """Compile (once per signature) and run ``make(constants)(*before, traced_inputs)``.

        Network inputs are traced arguments. When a converter needs one of them as a constant
        (a shape, axes or scales fed at run time, as in ONNX's node tests), the graph is traced
        again with the integer inputs, then all inputs, as constants of the trace; the
        executables are then cached per value of those inputs.
        """
        self._check_version()
        host = self.network.check_feeds(feeds)
        signature = _signature(host[n] for n in self.network.inputs)
        level = self._levels.get((kind, signature), 0)
        while True:
            static = self._static_inputs(host, level)
            consts = {n: np.asarray(host[n]) for n in static}
            try:
                # Compiled executables copy numpy feeds to their device themselves (faster than device_put);
                # the eager mode needs JAX arrays, or every node would fold as a constant.
                put = host_array if self.options["jit"] else (lambda v: to_jax(v, self._device))
                traced = {n: put(host[n]) for n in self.network.inputs if n not in consts}
            except Deep500Error:
                dtypes = ", ".join(f"'{n}' {np.asarray(host[n]).dtype}" for n in self.network.inputs)
                raise FeedError("The jax executor cannot take these feeds: JAX has no array type for one of them; "
                                f"it takes numeric and bool arrays. Received: {dtypes}") from None
            key = (kind, signature, level, tuple((n, v.tobytes()) for n, v in consts.items()))
            args = (*before, traced)
            try:
                fn = self._compiled.get(key)
                if fn is None:  # build the traced function only when it must be compiled
                    fn = self._compile(key, make(consts), args, donate)
                break
            except ModelError as exc:
                if getattr(exc, "constant_params", None):
                    # Trace again with those parameters as constants (their gradient is zero: they only
                    # feed values XLA must know, such as shapes); feed_tensor on one recompiles.
                    self._const_params |= exc.constant_params
                    continue
                nxt = level + 1
                if nxt < _STATIC_LEVELS and not self._static_inputs(host, nxt):
                    nxt += 1
                if not getattr(exc, "needs_constant", False) or nxt >= _STATIC_LEVELS or \
                        len(self._static_inputs(host, nxt)) == len(static):
                    raise
                level = nxt
        self._levels[(kind, signature)] = level
        self._check_indices(key, host)
        return self._call(fn, args, where)

    # ------------------------------------------------------------- running
    def inference(self, feeds):
        """Run the network forward (see :meth:`GraphExecutor.inference`); outputs are fresh numpy arrays.

        The first call for a feed signature (shapes and dtypes) traces and compiles the graph
        (timed in :attr:`compile_seconds`); later ones reuse the executable.
        """
        def make(consts):
            def run(params, inputs):
                return self._forward(params, {**consts, **inputs})[0]
            return run

        results = self._execute(("infer",), feeds, make, (self._params,), None)
        return {name: np.array(r) for name, r in zip(self.network.outputs, results)}

    def _initializer_ancestors(self, name: str) -> set[str]:
        """The parameters tensor ``name`` is computed from (walking the graph's producers back)."""
        producers = {out: node for node in self._nodes for out in node.output if out}
        found, todo, seen = set(), [name], set()
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            if current in self._params:
                found.add(current)
            node = producers.get(current)
            if node is not None:
                todo.extend(n for n in node.input if n)
        return found

    def _gradient_split(self, y: str):
        """``(network.gradient(y), the trained parameter names)``, cached per ``y`` and network version."""
        cached = self._splits.get(y)
        if cached is not None and cached[0] == self.network.version:
            return cached[1]
        pairs = self.network.gradient(y)
        split = pairs, [p for p, _ in pairs if p in self._params]
        self._splits[y] = (self.network.version, split)
        return split

    def _train_function(self, y: str, consts: dict):
        """``(train, frozen, step, inputs) -> (outputs, y, grads, running-stat updates)``."""
        def loss_fn(train, frozen, step, inputs):
            outs, value, updates = self._forward({**frozen, **train}, {**consts, **inputs}, step, y)
            value = jnp.asarray(value)
            if value.size != 1:
                raise FeedError(f"inference_and_backprop: y='{y}' must be a scalar (one element). "
                                f"Received: shape {list(value.shape)}")
            return value.reshape(()), (outs, updates)

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        def train(train, frozen, step, inputs):
            (value, (outs, updates)), grads = grad_fn(train, frozen, step, inputs)
            return outs, value, grads, updates
        return train

    def _split_params(self, trained):
        train = {p: self._params[p] for p in trained}
        frozen = {p: v for p, v in self._params.items() if p not in train}
        return train, frozen

    def _store(self, pairs, grads: dict, updates: dict) -> None:
        for name, value in updates.items():
            self._params[name] = value
        self._grads, self._grad_names = {}, {}
        for p, g in pairs:
            self._grad_names[g] = p
            if p in grads:
                self._grads[g] = grads[p]

    def inference_and_backprop(self, feeds, y="loss"):
        """Run forward in training mode and take the gradient of the scalar ``y``, in one XLA call.

        Training mode: ``BatchNormalization`` normalizes with the batch statistics and its running
        statistics are replaced after the step (ONNX's rule ``running * momentum + batch * (1 -
        momentum)``, written by the converter through ``ctx.assign``); ``Dropout`` draws its mask
        with the key ``fold_in(fold_in(PRNGKey(seed), step), node index)``, ``step`` counting the
        training calls. Gradients of every parameter ``network.gradient(y)`` lists come from
        ``jax.value_and_grad`` and stay on the device until fetched as ``"<param>_grad"``; a
        listed parameter through which nothing flows has a zero gradient.

        Args:
            feeds: one numpy array per network input.
            y: the scalar tensor to differentiate (a graph tensor, output or not).

        Returns:
            The graph outputs computed in training mode, as numpy arrays.

        Raises:
            ModelError: ``y`` is not a tensor of the network.
            FeedError: ``y`` has more than one element, or the feeds do not match the inputs.
        """
        self._check_version()
        pairs, trained = self._gradient_split(y)
        train, frozen = self._split_params(trained)
        before = (train, frozen, np.uint32(self._step))
        outs, _, grads, updates = self._execute(("train", y, tuple(trained)), feeds,
                                                lambda consts: self._train_function(y, consts), before,
                                                "training graph")
        self._step += 1
        self._store(pairs, grads, updates)
        return {name: np.array(r) for name, r in zip(self.network.outputs, outs)}

    def train_step(self, feeds, y: str, transform, opt_state):
        """One training step with an optax transformation, forward, backward and update in ONE XLA call.

        The native optimizers (:mod:`deep500lite.frameworks.jax.optimizers`) call this. The
        compiled function computes the outputs and gradients as :meth:`inference_and_backprop`
        does, then ``transform.update`` and ``optax.apply_updates``; the new parameters and
        optimizer state replace the old ones on the device.

        Args:
            feeds: one numpy array per network input.
            y: the scalar loss.
            transform: an ``optax.GradientTransformation`` (the executable is cached per transform).
            opt_state: its state for the parameters ``network.gradient(y)`` lists, or None to
                initialize it here.

        Returns:
            ``(outputs, new opt_state)``: the outputs (before the update) as numpy arrays.
        """
        import optax

        self._check_version()
        pairs, trained = self._gradient_split(y)
        train, frozen = self._split_params(trained)
        if opt_state is None:
            opt_state = transform.init(train)

        def make(consts):
            forward_backward = self._train_function(y, consts)

            def fused(train, frozen, step, opt_state, inputs):
                outs, value, grads, updates = forward_backward(train, frozen, step, inputs)
                deltas, opt_state = transform.update(grads, opt_state, train)
                # The new parameters and state come first: XLA gives each donated buffer to the first
                # output of its shape, and they, not the gradients, must take over the old buffers.
                return optax.apply_updates(train, deltas), opt_state, outs, grads, updates
            return fused

        before = (train, frozen, np.uint32(self._step), opt_state)
        # The trained parameters and the optimizer state are replaced after the step: their buffers
        # are donated to the executable, which writes the new values in place (as a native JAX loop does).
        new_train, opt_state, outs, grads, updates = self._execute(("step", y, tuple(trained), transform), feeds,
                                                                   make, before, "training graph", donate=(0, 3))
        self._step += 1
        self._params.update(new_train)
        self._store(pairs, grads, updates)
        return {name: np.array(r) for name, r in zip(self.network.outputs, outs)}, opt_state

    def apply_gradients(self, transform, opt_state, grads: dict):
        """Update the parameters named in ``grads`` (numpy gradients) with an optax transformation.

        The path of optimizers given a ``gradient_modifier`` (whose gradients went through numpy).

        Returns:
            The new ``opt_state`` (``transform.init`` is called when ``opt_state`` is None).
        """
        import optax

        train = {p: self._params[p] for p in grads}
        grads = {p: to_jax(np.asarray(g, dtype=np.asarray(train[p]).dtype), self._device) for p, g in grads.items()}
        if opt_state is None:
            opt_state = transform.init(train)

        def update(train, opt_state, grads):
            deltas, opt_state = transform.update(grads, opt_state, train)
            return optax.apply_updates(train, deltas), opt_state

        args = (train, opt_state, grads)
        fn = self._compile(("update", transform, _signature(train.values())), update, args)
        new_train, opt_state = self._call(fn, args, "optimizer update")
        self._params.update(new_train)
        return opt_state

    # --------------------------------------------------------------- tensors
    def jax_array(self, name: str) -> jax.Array:
        """The live JAX array of a parameter, or of a gradient ``"<param>_grad"`` after backprop.

        The native optimizers' fused step donates the trained parameters' buffers to XLA, which
        writes the new values into them: an array taken here before such a step is deleted by it
        (JAX raises on use). Take it again after the step, or copy it (``fetch_tensor``).

        Raises:
            UserKeyError: no such tensor (a ``KeyError``).
        """
        value = self._params.get(name)
        if value is not None:
            return value
        if name in self._grad_names:
            grad = self._grads.get(name)
            if grad is None:  # a listed parameter kept as a trace constant: no gradient flows
                return jnp.zeros_like(self._param_value(self._grad_names[name]))
            return grad
        raise UserKeyError(f"The jax executor holds no tensor '{name}'. Parameters: {sorted(self._params)[:20]}; "
                           f"gradients ('<param>_grad') exist after inference_and_backprop for the parameters "
                           f"network.gradient(y) lists. Received: {name!r}")

    def _param_value(self, name):
        return self._params[name] if name in self._params else self._consts[name]

    def has_tensor(self, name):
        return name in self._params or name in self._consts or name in self._grad_names

    def fetch_tensor(self, name):
        if name in self._consts:
            return np.array(self._consts[name])
        return to_numpy(self.jax_array(name))

    def feed_tensor(self, name, value):
        value = np.asarray(value)
        old = self._params.get(name)
        if old is None:
            old = self._consts.get(name)
        if old is None:
            raise UserKeyError(f"feed_tensor: the jax executor holds no tensor '{name}'. "
                               f"Parameters: {sorted(self._params)[:20]}. Received: {name!r}")
        if tuple(value.shape) != tuple(old.shape) or value.dtype != np.dtype(old.dtype):
            raise FeedError(f"feed_tensor('{name}'): expected {np.dtype(old.dtype).name}{list(old.shape)}. "
                            f"Received: {value.dtype.name}{list(value.shape)}")
        if name in self._params:
            self._params[name] = to_jax(value, self._device)
            if name in self._const_params:
                self._compiled.clear()  # its value is a constant of the executables
        else:
            self._consts[name] = np.array(value, copy=True)
            self._compiled.clear()  # the old value may be folded into the executables

    def device_peak_memory(self, reset: bool = False) -> int | None:
        """``peak_bytes_in_use`` of the executor's GPU from ``jax.Device.memory_stats`` (None on the CPU).

        JAX cannot reset the peak: ``reset=True`` returns None and the next read still reports
        the peak since the process started.
        """
        if not self.devname.is_gpu or reset:
            return None
        stats = self._device.memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        return None if peak is None else int(peak)


def _custom_converter(node) -> Callable:
    """The converter of a custom-domain node: its registered operator through ``jax.pure_callback``."""
    from deep500lite.frameworks.jax.custom import custom_op
    from deep500lite.lv0.custom import lookup_custom_op

    call = custom_op(lookup_custom_op(node.op_type, node.domain, node.name or node.output[0]))
    return lambda ctx, *xs: call(*[jnp.asarray(x) for x in xs])


def from_model(network, device=None, seed: int = 0, **options) -> JaxExecutor:
    """Build a :class:`JaxExecutor` for a Network, ONNX file or ModelProto on ``device``.

    ``options``: ``jit`` and ``matmul_precision`` (see :class:`JaxExecutor`).
    """
    return JaxExecutor(network, device, seed=seed, **options)


def from_onnx(onnx_file, device=None, **kwargs) -> JaxExecutor:
    """Deep500's ``from_onnx``: read an ONNX file with ``d5.parser.load_and_parse_model``, then :func:`from_model`."""
    from deep500lite.lv1.parser import load_and_parse_model

    return from_model(load_and_parse_model(onnx_file), device, **kwargs)
