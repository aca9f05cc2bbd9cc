"""The PyTorch graph executor: an ONNX graph compiled into one generated Python function."""

from __future__ import annotations

import contextlib
import itertools
import linecache
import shutil

import numpy as np
import torch

from deep500lite.errors import (Deep500Error, FeedError, FrameworkNotAvailableError, UserError, UserKeyError,
                                 UserTypeError, format_choices)
from deep500lite.lv1.compile_progress import compiling
from deep500lite.lv1.device import Device
from deep500lite.lv1.execution_errors import execution_error, shape_of
from deep500lite.lv1.executor import GraphExecutor
from deep500lite.lv1.control_flow import subgraph_captures
from deep500lite.lv1.network import FLOAT_DTYPES
from deep500lite.frameworks.torch.dtypes import to_numpy, to_torch
from deep500lite.frameworks.torch.ops import SUPPORTED_OPS, NodeSpec, build_node

__all__ = ["TorchExecutor", "from_model", "from_onnx", "torch_device", "COMPILE_MODES"]

#: The ``mode`` values of ``torch.compile`` that ``compile_mode`` accepts.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

# torch._dynamo's own timers (seconds per compilation): a whole frame's compilation (tracing,
# AOTAutograd, inductor's forward and, when not deferred, backward code generation and C++ build),
# and the deferred compilation of a backward graph on its first backward pass.
_COMPILE_TIMERS = ("_compile.compile_inner", "backward._backward_impl")

# Ops whose output may share memory with an input (a view or the input itself).
_MAY_ALIAS = frozenset({
    "Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice",
    "Expand", "Split", "Cast", "CastLike", "Gather", "Clip", "Sum", "Max", "Min", "Where",
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "Pad", "Concat", "Tile", "Einsum",
    "DepthToSpace", "SpaceToDepth", "If", "Loop", "Scan",
})

_compiled_graphs = itertools.count()


def torch_device(device: Device) -> torch.device:
    """The torch device for a deep500lite :class:`~deep500lite.Device`."""
    return torch.device("cuda", device.index) if device.is_gpu else torch.device("cpu")


def _feed_error(feeds, names) -> FeedError:
    """The error for feeds that torch has no tensor type for (``to_torch`` raised a TypeError)."""
    dtypes = ", ".join(f"'{name}' {np.asarray(feeds[name]).dtype}" for name in names)
    return FeedError("The torch executor cannot take these feeds: torch has no tensor type for one of them; it "
                     f"takes numeric and bool arrays. Received: {dtypes}")


class TorchExecutor(GraphExecutor):
    """Runs a network with PyTorch operators on the CPU or a CUDA GPU.

    At construction (and whenever the network changes) the ONNX graph is compiled into a single
    generated Python function with one call per node; attributes are parsed and nodes whose
    inputs are all known at build time (``Constant`` nodes, integer initializers such as shapes,
    ``Shape`` of initializers and everything computed from these) are folded into constants.
    ``inference`` then converts the feeds, calls that function under ``torch.inference_mode()``
    and converts the outputs back to numpy.

    Every initializer is converted once to a tensor on the executor's device. Floating-point
    initializers (the parameters) are leaf tensors updated in place by :meth:`feed_tensor`, so
    the compiled function keeps seeing their current values; feeding another initializer
    recompiles the graph, since it may have been folded.

    Training (:meth:`inference_and_backprop`) runs a second generated function, compiled on first
    use, in which ``BatchNormalization`` uses batch statistics and updates the running statistics
    in place and ``Dropout`` is active; gradients stay on the device as the parameters' ``.grad``.

    With ``compile=True`` both generated functions run through ``torch.compile`` (TorchDynamo
    captures the torch calls, inductor generates fused C++/OpenMP code on the CPU and Triton
    kernels on a GPU); autograd through the compiled forward runs a backward graph that
    AOTAutograd compiled too. A new input shape (or a parameter's ``requires_grad`` changing)
    recompiles. :attr:`compile_seconds` adds up torch._dynamo's own compile-time counters
    (``torch._dynamo.utils.compilation_time_metrics``: ``_compile.compile_inner``, the whole
    compilation of a captured frame, and ``backward._backward_impl``, a backward graph compiled
    on its first backward pass) read before and after each call, so it holds compilation only,
    never the run; compilations elsewhere in the process during a call would count too.
    The failing ONNX node of an error inside compiled code cannot be named.

    Args:
        network: a Network, an ONNX file or an ``onnx.ModelProto``.
        device: ``None``/``"cpu"`` or ``"gpu:N"``.
        seed: seed of the generator training-mode ``Dropout`` draws its masks from.
        compile: run inference and training through ``torch.compile`` (inductor).
        compile_mode: ``torch.compile``'s ``mode``: one of :data:`COMPILE_MODES`.

    Raises:
        UserError: ``compile_mode`` is not one of :data:`COMPILE_MODES`.
        FrameworkNotAvailableError: ``compile=True`` on the CPU and no C++ compiler is found.
    """

    framework = "torch"
    SUPPORTED_OPS = SUPPORTED_OPS

    def __init__(self, network, device=None, seed: int = 0, compile: bool = False, compile_mode: str = "default"):
        if not isinstance(compile, bool):
            raise UserTypeError(f"compile must be True or False. Received: {compile!r}")
        if compile_mode not in COMPILE_MODES:
            raise UserError(f"Unknown compile_mode for torch.compile: allowed {format_choices(COMPILE_MODES)}. "
                            f"Received: compile_mode={compile_mode!r}")
        super().__init__(network, device)
        self._compile = compile
        self._compile_mode = compile_mode
        self.compile_seconds = 0.0
        self.options = {"compile": True, "compile_mode": compile_mode} if compile else {"compile": False}
        if compile and not self.devname.is_gpu:
            _check_cpp_compiler()
        self._device = torch_device(self.devname)
        self._tensors: dict[str, torch.Tensor] = {}
        self._line_nodes: dict[str, dict] = {}  # generated code name -> {line: node}
        self._io_names: tuple = (None, [], [])  # (network structure key, inputs, outputs) for inference
        self._generator = torch.Generator(device=self._device)
        self._generator.manual_seed(seed)
        self._compile_seen: set = set()  # (function id, input shapes) whose compilation was reported
        self._grads: dict[str, torch.Tensor] = {}    # gradient name -> parameter (holds .grad)
        self._grad_params: list[torch.Tensor] = []
        self._have_grads = False
        self._grad_state: tuple | None = None        # (network version, y) requires_grad is set for
        self._gradient_hook = None                   # set_gradient_hook's object, its torch handles, its state
        self._hook_handles: list = []
        self._hook_copies: list = []                 # (device gradient, host copy) handed to the hook
        self._hook_error: BaseException | None = None
        self._build()

    @classmethod
    def supports_custom_domain(cls, domain: str) -> bool:
        """Any domain: registered custom operators run as ``torch.autograd.Function`` objects."""
        return True

    # -------------------------------------------------------------- devices
    @classmethod
    def supports_device(cls, device: Device) -> bool:
        """The CPU always; ``gpu:N`` when CUDA is available and has a device N."""
        if not device.is_gpu:
            return True
        return torch.cuda.is_available() and device.index < torch.cuda.device_count()

    @classmethod
    def device_unavailable_reason(cls, device: Device) -> str:
        """Why ``device`` cannot be used on this machine."""
        if not torch.cuda.is_available():
            return (f"torch.cuda.is_available() is False on this machine (torch {torch.__version__}); "
                    "use device='cpu'.")
        return (f"this machine has {torch.cuda.device_count()} CUDA device(s); use gpu:0 to "
                f"gpu:{torch.cuda.device_count() - 1} or cpu.")

    def synchronize(self) -> None:
        """Wait for the GPU's queued work (no-op on the CPU)."""
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)

    # -------------------------------------------------------------- building
    def _build(self) -> None:
        net = self.network
        host = net.host_values()
        for name in net.initializers:
            if name not in self._tensors:
                self._tensors[name] = _owned_tensor(host[name], self._device)
        params = {n for n in net.initializers if self._tensors[n].is_floating_point()
                  and host[n].dtype in FLOAT_DTYPES}
        self._params = params
        self._line_nodes.clear()
        self._run, self._copy_out = self._generate(training=False)
        if self._compile:
            self._run = self._compiled(self._run)
        self._train_fns: dict[str, tuple] = {}  # y -> (function, copy flags), built on first use
        self._built_version = net.version

    def _generate(self, training: bool, y: str | None = None):
        """Compile the graph into one Python function of the network inputs.

        Returns ``(function, copy_out)``: the function returns the graph outputs (then ``y``
        when given); ``copy_out[i]`` says whether output ``i`` may alias held memory.
        """
        net = self.network
        params = self._params
        static: dict[str, torch.Tensor] = {n: t for n, t in self._tensors.items() if n not in params}
        host_static: dict[str, np.ndarray] = {}

        def const_of(name):
            if not name or name not in static:
                return None
            if name not in host_static:
                host_static[name] = to_numpy(static[name])
            return host_static[name]

        env: dict[str, str] = {}           # tensor name -> expression in the generated code
        namespace: dict[str, object] = {}  # globals of the generated code
        internal: set[str] = set(net.inputs) | set(net.initializers)  # may alias held memory
        lines = []                         # (code line, node or None)
        for i, name in enumerate(net.inputs):
            env[name] = f"x{i}"
        for name in net.initializers:
            namespace[f"p{len(namespace)}"] = self._tensors[name]
            env[name] = f"p{len(namespace) - 1}"

        opset = net.opset
        generator = self._generator if training else None
        # Training-mode BatchNormalization updates state: it runs on every call.
        unfoldable = ("Dropout", "BatchNormalization") if training else ("Dropout",)
        with torch.no_grad():
            for k, node in enumerate(net.graph.node):
                spec = NodeSpec(node, opset, [const_of(n) for n in node.input], self._device,
                                training=training, generator=generator)
                captured = spec.captured = subgraph_captures(node)
                fn = build_node(spec)
                foldable = all(not n or n in static for n in list(node.input) + captured) or (
                    node.op_type == "Shape" and node.input[0] in self._tensors)
                if foldable and node.op_type not in unfoldable:
                    args = [static.get(n, self._tensors.get(n)) if n else None for n in list(node.input) + captured]
                    result = fn(*args)
                    results = result if isinstance(result, (tuple, list)) else (result,)
                    for out, value in zip(node.output, results):
                        if out and value is not None:
                            static[out] = value
                            namespace[f"c{len(namespace)}"] = value
                            env[out] = f"c{len(namespace) - 1}"
                            internal.add(out)
                    continue
                namespace[f"f{k}"] = fn
                args = [env[n] if n else "None" for n in node.input]
                while args and args[-1] == "None":
                    args.pop()
                args += [env[n] for n in captured]  # what the node's subgraphs read from outside
                outs = []
                for j, out in enumerate(node.output):
                    var = f"v{k}_{j}"
                    outs.append(var)
                    if out:
                        env[out] = var
                if node.op_type in _MAY_ALIAS and any(n in internal for n in node.input if n):
                    internal.update(o for o in node.output if o)
                target = outs[0] if len(outs) == 1 else ", ".join(outs) + ","
                lines.append((f"    {target} = f{k}({', '.join(args)})", node))

        missing = [o for o in net.outputs if o not in env]
        if missing:
            raise FeedError(f"The network's output(s) {missing} are produced by no node and are no input; every "
                            f"output must come from a node, an input or an initializer. "
                            f"Received: outputs {list(net.outputs)}")
        returned = list(net.outputs) + ([y] if y is not None else [])
        code = self._source(lines, [f"x{i}" for i in range(len(net.inputs))], [env[o] for o in returned])
        code_name = f"<deep500lite-torch-{'train' if training else 'graph'}-{next(_compiled_graphs)}>"
        compiled = compile(code, code_name, "exec")
        # Lets tracebacks show the generated line of a failing node.
        linecache.cache[code_name] = (len(code), None, code.splitlines(True), code_name)
        exec(compiled, namespace)
        self._line_nodes[code_name] = {i + 2: node for i, (_, node) in enumerate(lines)}
        return namespace["_run"], [o in internal for o in net.outputs]

    def _compiled(self, fn):
        """``fn`` through ``torch.compile`` with inductor (compiled lazily, on the first call)."""
        return torch.compile(fn, backend="inductor", mode=self._compile_mode)

    @staticmethod
    def _source(lines, inputs, outputs) -> str:
        # Free each intermediate after its last use, as an eager program would.
        body = [text for text, _ in lines]
        last_use: dict[str, int] = {}
        for i, text in enumerate(body):
            for tok in text.replace("=", " ").replace("(", " ").replace(")", " ").replace(",", " ").split():
                if tok[0] == "v":
                    last_use[tok] = i  # a definition never used later counts as its own last use
        returned = set(outputs)
        out = [f"def _run({', '.join(inputs)}):"]
        for i, text in enumerate(body):
            out.append(text)
            dead = [v for v, j in last_use.items() if j == i and v not in returned]
            if dead:
                out[-1] += "; del " + ", ".join(sorted(dead))
        out.append(f"    return ({', '.join(outputs)}{',' if outputs else ''})")
        return "\n".join(out) + "\n"

    def is_compiled(self) -> bool:
        """True with ``compile=True`` (``torch.compile`` compiles on the first call per input shape)."""
        return self._compile

    def _random_state(self):
        return self._generator.get_state()

    def _restore_random_state(self, state) -> None:
        self._generator.set_state(state)

    def _compile_notice(self, fn, args, what: str):
        """:func:`~deep500lite.lv1.compile_progress.compiling` on the first call of ``fn`` per input shape."""
        if not self._compile:
            return contextlib.nullcontext()
        key = (id(fn), tuple(tuple(a.shape) for a in args))
        if key in self._compile_seen:
            return contextlib.nullcontext()
        self._compile_seen.add(key)
        return compiling(self, what, [k for k in key[1]], f"torch.compile, inductor, mode {self._compile_mode}")

    def _network_changed(self) -> None:
        super()._network_changed()
        self._build()

    # ------------------------------------------------------------- running
    def inference(self, feeds):
        """Run the network forward (see :meth:`GraphExecutor.inference`).

        Outputs are fresh numpy arrays: one that would share memory with a parameter, a constant
        or a feed is copied.
        """
        feeds = self.network.check_feeds(feeds)
        names = self._names()
        args = self._input_tensors(feeds, names[1])
        before = _compile_clock() if self._compile else 0.0
        try:
            with self._compile_notice(self._run, args, "the inference function"), torch.inference_mode():
                results = self._run(*args)
        except Exception as exc:  # noqa: BLE001 - reported as an ExecutionError naming the node
            error = self._node_error(exc, None)
        else:
            error = None
        if self._compile:
            self.compile_seconds += _compile_clock() - before
        if error is None:
            return {name: _output_array(r, copy) for name, r, copy in zip(names[2], results, self._copy_out)}
        raise error  # outside the except block: the error keeps no frame of the failed run alive

    def _names(self) -> tuple:
        """``(structure key, input names, output names)``, read from the ONNX graph once per structure.

        ``Network.inputs`` and ``outputs`` walk the graph's protobuf fields on every access; the
        per-call paths take the names from here instead.
        """
        net = self.network
        names = self._io_names
        key = (net.version, len(net.initializers))
        if names[0] != key:
            names = self._io_names = (key, net.inputs, net.outputs)
        return names

    def _input_tensors(self, feeds, inputs) -> list:
        """The checked feeds as tensors on the device, in the order of ``inputs``."""
        device = self._device
        try:
            return [_input_tensor(feeds[name], device) for name in inputs]
        except TypeError as exc:
            raise _feed_error(feeds, inputs) from exc

    def _node_error(self, exc: Exception, where: str | None) -> Exception:
        """The :class:`ExecutionError` for ``exc``, raised while running generated code.

        The failing node is the one whose generated line the traceback passes through; its
        input values are read from that frame's variables (nothing is recorded beforehand).
        """
        if isinstance(exc, Deep500Error):
            return exc
        tb = exc.__traceback__
        node = shapes = None
        while tb is not None:
            frame = tb.tb_frame
            lines = self._line_nodes.get(frame.f_code.co_filename)
            if lines is not None and tb.tb_lineno in lines:
                node = lines[tb.tb_lineno]
                shapes = _call_input_shapes(frame, linecache.getline(frame.f_code.co_filename, tb.tb_lineno), node)
                break
            tb = tb.tb_next
        tb = frame = None
        return execution_error("torch", exc, node, shapes, where)

    def inference_and_backprop(self, feeds, y="loss"):
        """Run forward in training mode, then backward from the scalar ``y`` with torch autograd.

        Training mode: ``BatchNormalization`` normalizes with the batch statistics (biased
        variance) and updates the running statistics in place with ONNX's rule
        ``running = running * momentum + batch_stat * (1 - momentum)``; ``Dropout`` draws its mask
        from this executor's generator (seeded with ``seed``) unless the graph feeds
        ``training_mode=False``. This runs a second generated function, compiled on the first
        call for each ``y``; :meth:`inference` is not affected.

        The gradients stay on the device as the parameters' ``.grad`` tensors (the parameters
        are leaf tensors; only those listed by ``network.gradient(y)`` require grad). They are
        converted to numpy only when fetched as ``"<param>_grad"``; :meth:`torch_tensor` returns
        them as tensors. A listed parameter through which no gradient flows (for example one
        read only by ``Shape``) has a zero gradient.

        Args:
            feeds: one numpy array per network input.
            y: the scalar tensor to differentiate (a graph tensor, output or not).

        Returns:
            The graph outputs computed in training mode, as numpy arrays.

        Raises:
            ModelError: ``y`` is not a tensor of the network.
            ValueError: ``y`` has more than one element.
            FeedError: the feeds do not match the network's inputs.
        """
        net = self.network
        feeds = net.check_feeds(feeds)
        names = self._names()
        args = self._input_tensors(feeds, names[1])
        if self._grad_state != (net.version, y):
            self._prepare_gradients(y)
        entry = self._train_fns.get(y)
        if entry is None:
            run, copy_out = self._generate(training=True, y=y)
            entry = self._train_fns[y] = (self._compiled(run) if self._compile else run), copy_out
        run, copy_out = entry
        for t in self._grad_params:
            t.grad = None
        self._have_grads = False
        before = _compile_clock() if self._compile else 0.0
        try:
            with self._compile_notice(run, args, "the training function"):
                results, error = self._train_run(run, args, y)
        finally:
            if self._compile:
                self.compile_seconds += _compile_clock() - before
        if self._gradient_hook is not None:
            self._gradient_hook_end(error)
        if error is not None:
            raise error
        self._have_grads = True
        return {name: to_numpy(r, copy) for name, r, copy in zip(names[2], results, copy_out)}

    def _forward_with_grad(self, run, args):
        """The training function run with autograd on: ``(results, None)`` or ``(None, error)``."""
        try:
            with torch.enable_grad():
                return run(*args), None
        except Exception as exc:  # noqa: BLE001 - reported as an ExecutionError naming the node
            return None, self._node_error(exc, "training graph")

    def _train_run(self, run, args, y):
        """The training function's forward then backward: ``(results, None)`` or ``(None, error)``."""
        results, error = self._forward_with_grad(run, args)
        if error is not None:
            return None, error
        target = results[-1]
        if not isinstance(target, torch.Tensor) or target.numel() != 1:
            shape = list(target.shape) if isinstance(target, torch.Tensor) else type(target).__name__
            raise FeedError(f"inference_and_backprop: y='{y}' must be a scalar (one element). "
                            f"Received: shape {shape}")
        if target.requires_grad:
            try:
                with torch.enable_grad():
                    (target if target.dim() == 0 else target.reshape(())).backward()
            except Exception as exc:  # noqa: BLE001 - autograd does not say which ONNX node failed
                error = execution_error("torch", exc, where="backward pass")
            if error is not None:
                return None, error
        return results, None

    def _prepare_gradients(self, y) -> None:
        """Make exactly the parameters ``y`` (a name, or a tuple of names) depends on require grad."""
        pairs = list(dict.fromkeys(pair for name in ((y,) if isinstance(y, str) else y)
                                   for pair in self.network.gradient(name)))
        wanted = {p for p, _ in pairs}
        for name in self._params:
            t = self._tensors[name]
            t.grad = None
            if t.requires_grad != (name in wanted):
                t.requires_grad_(name in wanted)
        self._grads = {g: self._tensors[p] for p, g in pairs}
        self._grad_params = list(self._grads.values())
        self._have_grads = False
        self._grad_state = (self.network.version, y)
        if self._gradient_hook is not None:
            self._install_gradient_hooks()

    # ------------------------------------------------------- gradient hook
    def set_gradient_hook(self, hook) -> bool:
        """Call ``hook.on_gradient(name, grad)`` as each parameter's ``.grad`` is complete during the
        backward pass (torch's ``register_post_accumulate_grad_hook``), and ``hook.on_backward_end()``
        after it; see :meth:`GraphExecutor.set_gradient_hook`.

        On the CPU ``grad`` is a numpy view of the ``.grad`` tensor (no copy: what the hook writes
        is the gradient); on a GPU it is a host copy, copied back into ``.grad`` after
        ``on_backward_end``. The torch hooks stay registered until ``set_gradient_hook(None)``
        (setting the same hook again changes nothing), so each backward pass then makes one
        Python call per parameter.

        Returns:
            True.
        """
        if hook is self._gradient_hook:
            return True
        self._remove_gradient_hooks()
        self._gradient_hook = hook
        if hook is not None and self._grad_state is not None:
            self._install_gradient_hooks()
        return True

    def _remove_gradient_hooks(self) -> None:
        for handle in self._hook_handles:
            handle.remove()
        self._hook_handles = []

    def _install_gradient_hooks(self) -> None:
        self._remove_gradient_hooks()
        for name, _ in self.network.gradient(self._grad_state[1]):
            self._hook_handles.append(self._tensors[name].register_post_accumulate_grad_hook(
                lambda param, name=name: self._gradient_ready(name, param)))

    def _gradient_ready(self, name: str, param: torch.Tensor) -> None:
        if self._hook_error is not None:
            return
        grad = param.grad
        try:
            if grad.device.type == "cpu" and grad.dtype in _PLAIN_TORCH:
                view = grad.detach().numpy()
            else:
                view = to_numpy(grad, copy=True)
                self._hook_copies.append((grad, view))
            self._gradient_hook.on_gradient(name, view)
        except BaseException as exc:  # noqa: BLE001 - raised after the backward pass, not through autograd
            self._hook_error = exc

    def _gradient_hook_end(self, error) -> None:
        """After the backward pass: ``on_backward_end``, host copies back to the device, a hook's error raised."""
        failed, self._hook_error = self._hook_error, None
        try:
            if failed is None and error is None:
                self._gradient_hook.on_backward_end()
                with torch.no_grad():
                    for grad, host in self._hook_copies:
                        grad.copy_(to_torch(host, grad.device))
        finally:
            self._hook_copies = []
        if failed is not None:
            raise failed

    def backprop(self, feeds, output_grads) -> dict:
        """Forward in training mode, then backward from given gradients of outputs (a vector-Jacobian product).

        Where :meth:`inference_and_backprop` starts backward from a scalar loss, this starts it
        from ``dL/d(output)`` for each output named in ``output_grads``, as a rank of a model-parallel
        scheme needs when it receives the gradient of its output from the next rank: torch
        autograd runs ``torch.autograd.backward(outputs, output_grads)`` through the same
        training-mode function, with no second forward pass.

        Args:
            feeds: one numpy array per network input.
            output_grads: graph output name -> its gradient, a numpy array of the output's shape
                (outputs left out contribute nothing).

        Returns:
            ``"<param>_grad"`` for every parameter those outputs depend on (as
            ``network.gradient`` lists them; zero where no gradient flows) and ``"<input>_grad"``
            for every floating-point network input, as numpy arrays. The parameter gradients also
            stay on the device as the parameters' ``.grad`` (fetchable as after
            :meth:`inference_and_backprop`).

        Raises:
            FeedError: the feeds do not match the inputs, or a gradient names no graph output or
                has another shape than its output.
        """
        net = self.network
        feeds = net.check_feeds(feeds)
        _, inputs, outputs = self._names()
        if not isinstance(output_grads, dict) or not output_grads:
            raise FeedError(f"backprop: output_grads must be a non-empty dict of graph output name to gradient. "
                            f"Outputs: {list(outputs)}. Received: {output_grads!r:.200}")
        unknown = [k for k in output_grads if k not in outputs]
        if unknown:
            raise FeedError(f"backprop: output_grads names tensors that are not graph outputs: {unknown}. "
                            f"Outputs: {list(outputs)}. Received: {list(output_grads)}")
        args = self._input_tensors(feeds, inputs)
        args = [t.detach().requires_grad_(True) if t.is_floating_point() else t for t in args]
        ys = tuple(o for o in outputs if o in output_grads)
        if self._grad_state != (net.version, ys):
            self._prepare_gradients(ys)
        entry = self._train_fns.get(None)
        if entry is None:
            run, copy_out = self._generate(training=True)
            entry = self._train_fns[None] = (self._compiled(run) if self._compile else run), copy_out
        run = entry[0]
        for t in self._grad_params:
            t.grad = None
        self._have_grads = False
        results, error = self._forward_with_grad(run, args)
        if error is not None:
            raise error
        tensors, grads = [], []
        for name, r in zip(outputs, results):
            if name not in output_grads:
                continue
            g = np.asarray(output_grads[name])
            if tuple(g.shape) != tuple(r.shape):
                raise FeedError(f"backprop: the gradient of '{name}' must have the output's shape {list(r.shape)}. "
                                f"Received: shape {list(g.shape)}")
            if r.requires_grad:
                tensors.append(r)
                grads.append(to_torch(g, self._device).to(r.dtype))
        if tensors:
            try:
                torch.autograd.backward(tensors, grads)
            except Exception as exc:  # noqa: BLE001 - autograd does not say which ONNX node failed
                error = execution_error("torch", exc, where="backward pass")
        if self._gradient_hook is not None:  # as in inference_and_backprop: the hook sees this backward too
            self._gradient_hook_end(error)
        if error is not None:
            raise error
        self._have_grads = True
        out = {g: to_numpy(self.torch_tensor(g), copy=True) for g in self._grads}
        for name, t in zip(inputs, args):
            if t.is_floating_point():
                out[f"{name}_grad"] = np.zeros(tuple(t.shape), to_numpy(t.detach()).dtype) if t.grad is None \
                    else to_numpy(t.grad, copy=True)
        return out

    # --------------------------------------------------------------- tensors
    def torch_tensor(self, name: str) -> torch.Tensor:
        """The live tensor on the device, without a copy.

        ``name`` is a parameter or constant initializer (parameters are leaf tensors, updated in
        place by :meth:`feed_tensor` and the native optimizers), or, after
        :meth:`inference_and_backprop`, a gradient ``"<param>_grad"`` (the parameter's ``.grad``,
        replaced by the next backward pass).

        Raises:
            UserKeyError: no such tensor (a ``KeyError``).
        """
        t = self._tensors.get(name)
        if t is not None:
            return t
        if self._have_grads and name in self._grads:
            p = self._grads[name]
            return torch.zeros_like(p) if p.grad is None else p.grad
        raise UserKeyError(f"The torch executor holds no tensor '{name}'. Parameters: "
                           f"{sorted(self._params)[:20]}; gradients ('<param>_grad') exist after "
                           f"inference_and_backprop for the parameters network.gradient(y) lists. Received: {name!r}")

    def has_tensor(self, name):
        return name in self._tensors or (self._have_grads and name in self._grads)

    def fetch_tensor(self, name):
        return to_numpy(self.torch_tensor(name), copy=True)

    def feed_tensor(self, name, value):
        value = np.asarray(value)
        old = self._tensors.get(name)
        if old is None:
            raise UserKeyError(f"feed_tensor: the torch executor holds no tensor '{name}'. "
                               f"Parameters: {sorted(self._params)[:20]}. Received: {name!r}")
        new = to_torch(value, torch.device("cpu"))
        if tuple(new.shape) != tuple(old.shape) or new.dtype != old.dtype:
            raise FeedError(f"feed_tensor('{name}'): expected {old.dtype}{list(old.shape)}. "
                            f"Received: {value.dtype.name}{list(value.shape)}")
        if name in self._params:
            with torch.no_grad():
                old.copy_(new)
        else:
            self._tensors[name] = new.clone().to(self._device)
            self._build()

    def device_peak_memory(self, reset: bool = False) -> int | None:
        """``torch.cuda.max_memory_allocated`` on the executor's GPU (None on the CPU).

        ``reset=True`` calls ``torch.cuda.reset_peak_memory_stats`` and returns None.
        """
        device = self.devname
        if device is None or not getattr(device, "is_gpu", False):
            return None
        if reset:
            torch.cuda.reset_peak_memory_stats(device.index)
            return None
        return int(torch.cuda.max_memory_allocated(device.index))


# numpy dtypes torch.from_numpy takes as they are (the others go through to_torch's bit views or casts).
_PLAIN_NUMPY = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                                                np.int64, np.uint8, np.bool_, np.complex64, np.complex128))
_PLAIN_TORCH = frozenset((torch.float16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
                          torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128))


def _owned_tensor(value: np.ndarray, device: torch.device) -> torch.Tensor:
    """A copy of an initializer in memory torch allocated: on the CPU 64-byte aligned, as a native
    module's parameters are (numpy's buffers are often only 16-byte aligned), so the kernels and the
    optimizer read and update the parameters as they would a ``torch.nn.Module``'s."""
    t = to_torch(value, device)
    return t.clone() if t.device.type == "cpu" else t


def _input_tensor(value, device: torch.device) -> torch.Tensor:
    """A feed as a torch tensor: ``to_torch``, with a shortcut for the common case.

    A writeable C-contiguous array of a dtype torch shares on the CPU becomes a tensor over the
    same memory with ``torch.from_numpy`` and none of ``to_torch``'s other checks.
    """
    if (type(value) is np.ndarray and device.type == "cpu" and value.dtype in _PLAIN_NUMPY
            and value.flags.c_contiguous and value.flags.writeable):
        return torch.from_numpy(value)
    return to_torch(value, device)


def _output_array(t: torch.Tensor, copy: bool) -> np.ndarray:
    """An inference result as numpy: ``to_numpy``, shortcut for an uncopied contiguous CPU tensor."""
    if not copy and t.dtype in _PLAIN_TORCH and t.device.type == "cpu" and not t.requires_grad and t.is_contiguous():
        return t.numpy()
    return to_numpy(t, copy)


def _call_input_shapes(frame, line: str, node) -> list | None:
    """The shapes of the arguments of the generated call ``line`` (``v3_0 = f3(x0, p1)``) in ``frame``."""
    if "(" not in line or ")" not in line:
        return None
    names = [a.strip() for a in line[line.index("(") + 1:line.index(")")].split(",") if a.strip()]
    scope = {**frame.f_globals, **frame.f_locals}
    shapes = ["absent" if name == "None" else shape_of(scope.get(name)) for name in names]
    return shapes + ["absent"] * (len(node.input) - len(shapes))


def _compile_clock() -> float:
    """Seconds torch._dynamo has spent compiling in this process so far (its own timers)."""
    from torch._dynamo.utils import compilation_time_metrics

    return float(sum(sum(compilation_time_metrics.get(key, ())) for key in _COMPILE_TIMERS))


def _check_cpp_compiler() -> None:
    """Raise a clear error when inductor will find no C++ compiler (it needs one on the CPU)."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        found = shutil.which(get_cpp_compiler())
    except Exception:  # noqa: BLE001 - an internal helper moved or refused: look for the usual names
        found = next((shutil.which(c) for c in ("g++", "c++", "clang++") if shutil.which(c)), None)
    if not found:
        raise FrameworkNotAvailableError(
            "torch.compile on the CPU needs a C++ compiler (inductor builds its kernels with it), and none was "
            "found: install g++ (apt-get install g++) or set CXX to a compiler's path; or use compile=False. "
            "Received: compile=True on the CPU")


def from_model(network, device=None, seed: int = 0, compile: bool = False,
               compile_mode: str = "default") -> TorchExecutor:
    """Build a :class:`TorchExecutor` for a Network, ONNX file or ModelProto on ``device``.

    ``compile=True`` runs it through ``torch.compile`` with ``compile_mode`` (see :class:`TorchExecutor`).
    """
    return TorchExecutor(network, device, seed=seed, compile=compile, compile_mode=compile_mode)


def from_onnx(onnx_file, device=None, **kwargs) -> TorchExecutor:
    """Deep500's ``from_onnx``: read an ONNX file with ``d5.parser.load_and_parse_model``, then :func:`from_model`."""
    from deep500lite.lv1.parser import load_and_parse_model

    return from_model(load_and_parse_model(onnx_file), device, **kwargs)
