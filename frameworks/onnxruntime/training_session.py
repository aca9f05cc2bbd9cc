"""Fused ONNX Runtime training: loss, gradients and the optimizer update in one session run.

The ONNX Runtime executor trains with deep500lite's reference optimizers. For the ones whose
update is a fixed formula (:data:`FUSED_OPTIMIZERS`: ``GradientDescent``, ``MomentumOptimizer``,
``NesterovOptimizer``, ``AdaGradOptimizer``, ``RMSPropOptimizer``, ``AdamOptimizer``) this module
appends the update to the training graph of :func:`deep500lite.lv1.autodiff.training_graph`, so
that one ``InferenceSession`` run computes the forward pass, the gradients, the new parameters,
the new optimizer state (velocity, moments, accumulators) and the new BatchNormalization running
statistics. Hyperparameters (learning rate, momentum, Adam's bias corrections) are scalar graph
inputs, so schedules change them without a rebuild.

State stays in ONNX Runtime's memory: every parameter, running statistic and optimizer slot has
two ``OrtValue`` buffers, and two ``IOBinding`` objects bind one buffer set as inputs and the
other as outputs; each step runs one binding and the roles swap, so no parameter crosses to the
host. The executor's parameter dict and gradient dict, and the optimizer's state dicts, become
:class:`DeviceTensors`: a value is copied to the host only when it is read (``fetch_tensor``,
checkpoints, the inference session rebuilt for evaluation), and a value written on the host
(``feed_tensor``, a restored checkpoint) is copied into the buffers before the next step.

The update formulas are those of :mod:`deep500lite.frameworks.reference.optimizers`, written
with the same operations in the same order, so the fused path gives the host path's results up
to float32 round-off. A step falls back to the host path (:meth:`ThreeStepOptimizer.step`) when
:func:`fused_step` returns None: an optimizer that is not exactly one of those classes (a
subclass may change the rule), a ``gradient_modifier``, an optimizer of another executor, or
``executor.fused_training = False``.

Before the session is built, :func:`~deep500lite.frameworks.onnxruntime.grad_rewrite.rewrite_training_model`
replaces the autodiff's slow gradient forms (the convolution weight gradient above all) by
equal ones that ONNX Runtime's CPU kernels run faster; ``executor.grad_rewrites`` names the
rewrites (default: :func:`~deep500lite.frameworks.onnxruntime.grad_rewrite.rewrites_for`, all of
them on CPU), ``()`` turns them off. The shared autodiff, and so every other executor, is unchanged.
"""

from __future__ import annotations

import weakref

import numpy as np
import onnx
from onnx import helper

from deep500lite.errors import UserError
from deep500lite.frameworks.onnxruntime.grad_rewrite import rewrite_training_model, rewrites_for
from deep500lite.frameworks.reference import optimizers as ref

__all__ = ["FUSED_OPTIMIZERS", "DeviceTensors", "FusedTraining", "fused_step", "fused_model"]

# optimizer class -> (its state dicts, as attribute names, in the order the update reads them)
FUSED_OPTIMIZERS = {
    ref.GradientDescent: (),
    ref.MomentumOptimizer: ("velocity",),
    ref.NesterovOptimizer: ("velocity",),
    ref.AdaGradOptimizer: ("accumulator",),
    ref.RMSPropOptimizer: ("accumulator",),
    ref.AdamOptimizer: ("first", "second"),
}
"""The reference optimizers whose update :func:`fused_model` writes into the graph, with their state."""


class DeviceTensors(dict):
    """A dict of numpy arrays whose stale entries are fetched from ONNX Runtime when read.

    Entries marked stale hold an outdated host array; reading one (``d[k]``, ``get``, ``items``,
    ``values``) calls the fetch function and keeps the result. Writing an entry marks it dirty:
    the fused step copies dirty entries into its buffers before it runs.
    """

    def __init__(self, values=()):
        super().__init__(values)
        self.stale: set = set()
        self.dirty: set = set(self)
        self.fetch = None

    def mark_stale(self, names, fetch) -> None:
        """Say that ``names`` now live in ONNX Runtime and are read with ``fetch(name)``."""
        self.fetch = fetch
        self.stale = set(names)
        self.dirty.difference_update(self.stale)

    def __getitem__(self, name):
        if name in self.stale:
            dict.__setitem__(self, name, self.fetch(name))
            self.stale.discard(name)
        return dict.__getitem__(self, name)

    def __setitem__(self, name, value):
        dict.__setitem__(self, name, value)
        self.stale.discard(name)
        self.dirty.add(name)

    def __delitem__(self, name):
        dict.__delitem__(self, name)
        self.stale.discard(name)
        self.dirty.discard(name)

    def get(self, name, default=None):
        return self[name] if name in self else default

    def items(self):
        return [(k, self[k]) for k in list(self.keys())]

    def values(self):
        return [self[k] for k in list(self.keys())]

    def copy(self):
        return dict(self.items())

    def clear(self):
        dict.clear(self)
        self.stale.clear()
        self.dirty.clear()

    def materialize(self) -> None:
        """Fetch every stale entry, so the dict no longer depends on ONNX Runtime."""
        for name in list(self.stale):
            self[name]  # noqa: B018 - the read fetches it
        self.dirty.clear()
        self.fetch = None


def _scalar_inputs(kind: type) -> tuple:
    """The scalar hyperparameter inputs of an optimizer's update, by role."""
    if kind is ref.GradientDescent:
        return ("lr",)
    if kind in (ref.MomentumOptimizer, ref.NesterovOptimizer):
        return ("lr", "momentum")
    if kind is ref.AdaGradOptimizer:
        return ("lr", "eps")
    if kind is ref.RMSPropOptimizer:
        return ("lr", "beta", "one_minus_beta", "eps")
    return ("step", "sqrt_c2", "eps", "b1", "one_minus_b1", "b2", "one_minus_b2")


def _scalar_values(opt) -> dict:
    """The values of :func:`_scalar_inputs` for the optimizer's current hyperparameters (and step)."""
    kind = type(opt)
    out = {"lr": opt.learning_rate}
    if kind in (ref.MomentumOptimizer, ref.NesterovOptimizer):
        out["momentum"] = opt.momentum
    elif kind is ref.AdaGradOptimizer:
        out["eps"] = opt.epsilon
    elif kind is ref.RMSPropOptimizer:
        out.update(beta=opt.beta, one_minus_beta=1 - opt.beta, eps=opt.epsilon)
    elif kind is ref.AdamOptimizer:
        c1, c2 = 1 - opt.beta1 ** opt.t, 1 - opt.beta2 ** opt.t
        placement = opt.epsilon_placement
        # the scalar products the reference computes in Python, in its order
        step = (opt.learning_rate * c2 ** 0.5 / c1 if placement == "keras"
                else opt.learning_rate / c1 if placement == "outside" else c1)
        out = {"step": step, "sqrt_c2": c2 ** 0.5 if placement == "outside" else c2, "eps": opt.epsilon,
               "b1": opt.beta1, "one_minus_b1": 1 - opt.beta1, "b2": opt.beta2, "one_minus_b2": 1 - opt.beta2}
        if placement == "inside":
            out["lr"] = opt.learning_rate
    return out


def _placement(opt) -> str | None:
    placement = getattr(opt, "epsilon_placement", None)
    allowed = ("outside", "inside", "keras") if type(opt) is ref.AdamOptimizer else ("outside", "inside")
    if placement is not None and placement not in allowed:
        raise UserError(f"{type(opt).__name__}: epsilon_placement must be one of "
                        f"{', '.join(repr(a) for a in allowed)} (where epsilon goes in the denominator). "
                        f"Received: {placement!r}")
    return placement


class _Builder:
    """Appends nodes with fresh names to a graph."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.taken = ({i.name for i in graph.input} | {o.name for o in graph.output}
                      | {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output})
        self.count = 0

    def name(self, hint: str) -> str:
        while True:
            self.count += 1
            candidate = f"{hint}__d5u{self.count}"
            if candidate not in self.taken:
                self.taken.add(candidate)
                return candidate

    def op(self, op_type: str, inputs: list, hint: str = "u", output: str | None = None) -> str:
        out = output or self.name(hint)
        self.graph.node.append(helper.make_node(op_type, inputs, [out], name=self.name(f"{op_type}_upd")))
        return out


def fused_model(tg, kind: type, placement: str | None, specs: dict):
    """The training model of ``tg`` with the optimizer update of ``kind`` appended.

    Args:
        tg: a :class:`~deep500lite.lv1.autodiff.training.TrainingGraph`.
        kind: one of :data:`FUSED_OPTIMIZERS`.
        placement: the optimizer's ``epsilon_placement`` (None for those without one).
        specs: parameter name -> (shape, numpy dtype).

    Returns:
        ``(model, new, slots, scalars)``: the ONNX model; state input -> output holding its next
        value (parameters, optimizer slots, running statistics); slot attribute -> {parameter ->
        slot input name}; (role, dtype) -> scalar input name.
    """
    specs = dict(specs)
    model = onnx.ModelProto()
    model.CopyFrom(tg.model)
    graph = model.graph
    b = _Builder(graph)
    roles = _scalar_inputs(kind) + (("lr",) if kind is ref.AdamOptimizer and placement == "inside" else ())
    scalars = {}
    for dt in sorted({np.dtype(d).str for _, d in specs.values()}):
        for role in roles:
            name = b.name(f"hp_{role}")
            scalars[(role, dt)] = name
            graph.input.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), []))
    slot_names = FUSED_OPTIMIZERS[kind]
    slots = {attr: {} for attr in slot_names}
    new = {stat: out for stat, out in tg.running_stats.items()}
    # the gradients stay outputs (fetch_tensor('<p>_grad') reads them); the update reads them too
    for p, g in tg.gradients.items():
        shape, dt = specs[p][0], np.dtype(specs[p][1])
        s = {role: scalars[(role, dt.str)] for role in roles}
        ttype = helper.np_dtype_to_tensor_dtype(dt)
        states = []
        for attr in slot_names:
            name = b.name(f"{p}_{attr}")
            slots[attr][p] = name
            states.append(name)
            specs[name] = specs[p]
            graph.input.append(helper.make_tensor_value_info(name, ttype, list(shape)))
        lr_g = None if kind is ref.AdamOptimizer else b.op("Mul", [s["lr"], g])
        if kind is ref.GradientDescent:
            new[p] = b.op("Sub", [p, lr_g], p)
        elif kind in (ref.MomentumOptimizer, ref.NesterovOptimizer):
            v = b.op("Sub", [b.op("Mul", [s["momentum"], states[0]]), lr_g], "velocity")
            new[states[0]] = v
            if kind is ref.MomentumOptimizer:
                new[p] = b.op("Add", [p, v], p)
            else:
                new[p] = b.op("Sub", [b.op("Add", [p, b.op("Mul", [s["momentum"], v])]), lr_g], p)
        elif kind in (ref.AdaGradOptimizer, ref.RMSPropOptimizer):
            if kind is ref.AdaGradOptimizer:
                a = b.op("Add", [states[0], b.op("Mul", [g, g])], "accumulator")
            else:
                a = b.op("Add", [b.op("Mul", [s["beta"], states[0]]),
                                 b.op("Mul", [b.op("Mul", [s["one_minus_beta"], g]), g])], "accumulator")
            new[states[0]] = a
            d = (b.op("Add", [b.op("Sqrt", [a]), s["eps"]]) if placement == "outside"
                 else b.op("Sqrt", [b.op("Add", [a, s["eps"]])]))
            new[p] = b.op("Sub", [p, b.op("Div", [lr_g, d])], p)
        else:
            m = b.op("Add", [b.op("Mul", [s["b1"], states[0]]), b.op("Mul", [s["one_minus_b1"], g])], "first")
            v = b.op("Add", [b.op("Mul", [s["b2"], states[1]]),
                             b.op("Mul", [b.op("Mul", [s["one_minus_b2"], g]), g])], "second")
            new[states[0]], new[states[1]] = m, v
            if placement == "keras":
                step = b.op("Div", [b.op("Mul", [m, s["step"]]), b.op("Add", [b.op("Sqrt", [v]), s["eps"]])])
            elif placement == "outside":
                step = b.op("Div", [b.op("Mul", [s["step"], m]),
                                    b.op("Add", [b.op("Div", [b.op("Sqrt", [v]), s["sqrt_c2"]]), s["eps"]])])
            else:
                m_hat = b.op("Div", [m, s["step"]])
                step = b.op("Div", [b.op("Mul", [s["lr"], m_hat]),
                                    b.op("Sqrt", [b.op("Add", [b.op("Div", [v, s["sqrt_c2"]]), s["eps"]])])])
            new[p] = b.op("Sub", [p, step], p)
    outputs = {o.name for o in graph.output}
    for state, out in new.items():
        if out not in outputs:
            ttype = helper.np_dtype_to_tensor_dtype(np.dtype(specs[state][1]))
            graph.output.append(helper.make_tensor_value_info(out, ttype, None))
            outputs.add(out)
    return model, new, slots, scalars


class FusedTraining:
    """One executor's fused training session for one optimizer class, loss and network version.

    Args:
        executor: the :class:`~deep500lite.frameworks.onnxruntime.OnnxRuntimeExecutor`.
        opt: the optimizer (one of :data:`FUSED_OPTIMIZERS`).
    """

    def __init__(self, executor, opt):
        from deep500lite.lv1.autodiff import training_graph

        self.key = _key(executor, opt)
        tensors = executor._tensors
        tg = training_graph(executor.network, opt.loss)
        self.tg = tg
        specs = {p: (tensors[p].shape, tensors[p].dtype) for p in tg.param_inputs}
        model, self.new, self.slots, self.scalars = fused_model(tg, type(opt), _placement(opt), specs)
        # ONNX Runtime-only forms of the slow gradients (grad_rewrite.py); () turns them off
        model, self.rewrites = rewrite_training_model(model, rewrites_for(executor))
        self.owner = weakref.ref(opt)
        self.model = model  # the fused training model (for profiling and error reports)
        self.session = executor._session_for(model)
        self.device = ("cuda", executor.devname.index) if executor.devname.is_gpu else ("cpu", 0)
        self.outputs = list(dict.fromkeys(tg.outputs + [tg.y]))
        self.grads = dict(tg.gradients)  # param -> gradient output
        # state input -> (shape, dtype): parameters and running statistics, then optimizer slots
        self.shapes = {k: (tensors[k].shape, tensors[k].dtype) for k in tg.param_inputs}
        for per_param in self.slots.values():
            for p, name in per_param.items():
                self.shapes[name] = self.shapes[p]
        self.banks = [{}, {}]  # two buffer sets: {state input: (OrtValue, numpy array or None)}
        for name, (shape, dtype) in self.shapes.items():
            first = self.banks[0][name] = self._buffer(np.zeros(shape, dtype))
            # constants (not updated by the step) have one buffer, read by both bindings
            self.banks[1][name] = self._buffer(np.zeros(shape, dtype)) if name in self.new else first
        self.current = 0  # the bank holding the state's present values
        # outputs ONNX Runtime allocates on each run: the network's outputs, the loss, the gradients
        self.fetched = self.outputs + [g for g in self.grads.values() if g not in self.outputs]
        self.bindings = [self._binding(i) for i in (0, 1)]
        self.last = None  # the OrtValues of the last run's fetched outputs, by name
        self.scalar_cache: dict = {}

    def _buffer(self, array):
        if self.device[0] == "cpu":
            return _ortvalue(array, "cpu", 0), array
        return _ortvalue(array, *self.device), None

    def _binding(self, i: int):
        binding = self.session.io_binding()
        src, dst = self.banks[i], self.banks[1 - i]
        for name in self.shapes:
            binding.bind_ortvalue_input(name, src[name][0])
        # get_outputs() lists outputs in binding order: the fetched ones first
        for name in self.fetched:
            binding.bind_output(name, self.device[0], self.device[1])
        for name, out in self.new.items():
            binding.bind_ortvalue_output(out, dst[name][0])
        return binding

    def read(self, name: str) -> np.ndarray:
        """A host copy of a state tensor's present value."""
        value, array = self.banks[self.current][name]
        return np.array(array if array is not None else value.numpy(), copy=True)

    def write(self, name: str, value) -> None:
        """Copy a host value into the state tensor's present buffer."""
        shape, dtype = self.shapes[name]
        value = np.asarray(value, dtype=dtype)
        if value.shape != shape:
            value = np.broadcast_to(value, shape)
        ortvalue, array = self.banks[self.current][name]
        if array is not None:
            np.copyto(array, value)
        else:
            ortvalue.update_inplace(np.ascontiguousarray(value))

    def upload(self, executor, opt) -> None:
        """Copy what the host changed (or holds fresh) into the present buffers."""
        tensors = executor._tensors
        if isinstance(tensors, DeviceTensors) and tensors.fetch is not None and tensors.fetch.__self__ is self:
            for name in tensors.dirty & set(self.shapes):
                self.write(name, dict.__getitem__(tensors, name))
            tensors.dirty.clear()
        else:
            for name in self.tg.param_inputs:
                self.write(name, tensors[name])
        for attr, per_param in self.slots.items():
            held = getattr(opt, attr)
            mine = isinstance(held, DeviceTensors) and held.fetch is not None and held.fetch.__self__ is self
            for p, name in per_param.items():
                if mine and p not in held.dirty:
                    continue
                value = held[p] if p in held else 0.0  # a foreign DeviceTensors fetches from its owner
                self.write(name, value)
            if mine:
                held.dirty.clear()

    def step(self, executor, opt, feeds) -> dict:
        """Run one fused step; returns the network's outputs (and the loss) on the host."""
        self.upload(executor, opt)
        binding = self.bindings[self.current]
        fixed = dict(executor.network.check_feeds(feeds)) if _needs_check(feeds) else dict(feeds)
        if self.tg.dropout_masks:
            fixed.update(self.tg.draw_masks(executor._dropout_rng))
        values = _scalar_values(opt)
        for (role, dt), name in self.scalars.items():
            fixed[name] = self._scalar(values[role], dt)
        try:
            for name, value in fixed.items():
                binding.bind_cpu_input(name, value)
            self.session.run_with_iobinding(binding)
        except Exception:  # noqa: BLE001 - the host path runs the same graph and explains the failure
            return None
        values = binding.get_outputs()
        self.last = dict(zip(self.fetched, values[:len(self.fetched)]))
        self.current = 1 - self.current
        self._install(executor, opt)
        return {name: np.array(self.last[name].numpy(), copy=True) for name in self.outputs}

    def _scalar(self, value, dt):
        key = (float(value), dt)
        cached = self.scalar_cache.get(key)
        if cached is None:
            if len(self.scalar_cache) > 64:
                self.scalar_cache.clear()
            cached = self.scalar_cache[key] = np.asarray(value, dtype=np.dtype(dt))
        return cached

    def _install(self, executor, opt) -> None:
        """Point the executor's and optimizer's dicts at the buffers just written."""
        tensors = executor._tensors
        if not isinstance(tensors, DeviceTensors):
            tensors = executor._tensors = DeviceTensors(tensors)
        tensors.mark_stale([k for k in self.new if k in self.tg.param_inputs], self.read)
        grads = executor._grads
        if not isinstance(grads, DeviceTensors):
            grads = executor._grads = DeviceTensors()
        dict.clear(grads)
        for p, g in self.grads.items():
            dict.__setitem__(grads, g, None)
        grads.mark_stale(list(self.grads.values()), self._read_grad)
        for attr, per_param in self.slots.items():
            held = getattr(opt, attr)
            if not isinstance(held, DeviceTensors):
                held = DeviceTensors()
                setattr(opt, attr, held)
            for p in per_param:
                dict.__setitem__(held, p, None)
            held.mark_stale(list(per_param), self._slot_reader(per_param))
        executor._parameters_changed()

    def _read_grad(self, name):
        value = self.last[name].numpy()
        return np.array(value, copy=True).reshape(value.shape)

    def _slot_reader(self, per_param):
        def read(p):
            return self.read(per_param[p])
        return _BoundReader(self, read)


class _BoundReader:
    """``fetch(name)`` for a slot dict, with ``__self__`` naming its :class:`FusedTraining`."""

    __slots__ = ("__self__", "_read")

    def __init__(self, owner, read):
        self.__self__, self._read = owner, read

    def __call__(self, name):
        return self._read(name)


def _ortvalue(array, device: str, index: int):
    """An ``OrtValue`` over ``array`` (CPU: sharing its memory) on ``device``."""
    import onnxruntime as ort

    return ort.OrtValue.ortvalue_from_numpy(array, device, index)


def _needs_check(feeds) -> bool:
    return any(not isinstance(v, np.ndarray) or not v.flags.c_contiguous for v in feeds.values())


def _key(executor, opt) -> tuple:
    return (executor.network.version, opt.loss, type(opt), _placement(opt),
            rewrites_for(executor))


def fused_step(executor, opt, feeds):
    """One fused training step of ``opt`` on ``executor``, or None when the host path must run it.

    Args:
        executor: the ONNX Runtime executor.
        opt: the optimizer whose :meth:`step` is running.
        feeds: the minibatch.

    Returns:
        The network's outputs (the loss included) before the update, or None: the optimizer is
        not exactly one of :data:`FUSED_OPTIMIZERS`, has a ``gradient_modifier``, trains another
        executor, ``executor.fused_training`` is false, or the fused run failed (the host path
        then runs the step and reports the error).
    """
    if (not getattr(executor, "fused_training", True) or type(opt) not in FUSED_OPTIMIZERS
            or opt.gradient_modifier is not None or opt.executor is not executor):
        return None
    state = getattr(executor, "_fused", None)
    if state is None or state.key != _key(executor, opt) or state.owner() is not opt:
        if state is not None:
            _detach(executor, state)
        state = executor._fused = FusedTraining(executor, opt)
    opt.new_input()
    out = state.step(executor, opt, feeds)
    if out is None:
        if type(opt) is ref.AdamOptimizer:
            opt.t -= 1  # the host path counts the step again
        return None
    return out


def _detach(executor, state) -> None:
    """Bring every value of an outgoing fused state to the host."""
    for holder in (executor._tensors, executor._grads):
        if isinstance(holder, DeviceTensors):
            holder.materialize()
    executor._fused = None
