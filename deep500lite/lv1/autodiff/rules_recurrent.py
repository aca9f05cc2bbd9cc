"""Level 1 autodiff: gradient rules of the recurrent operators LSTM, GRU and RNN.

The backward pass is unrolled over the time axis, whose length must be static (shape inference
gives it for models with fixed input shapes, as ``torch.onnx.export`` writes them). The rule first
re-runs the recurrence step by step with MatMul, Add, Sigmoid and Tanh to keep every gate's value,
then backpropagates through the steps in reverse order, so the backward graph holds only standard
ONNX operators that every executor runs. Supported: directions forward, reverse and bidirectional,
``layout=0``, the default activations, GRU's ``linear_before_reset`` 0 and 1, optional B,
initial_h and initial_c; gradients of X, W, R, B, initial_h and initial_c, with any of the outputs
Y, Y_h and Y_c used downstream. Refused (``UnsupportedOperatorError``): sequence_lens, LSTM
peepholes, ``clip``, ``input_forget``, ``layout=1`` and non-default activations. The rules register
themselves in :data:`~deep500lite.lv1.autodiff.rules.RULES` when this module is imported.
"""

from __future__ import annotations

import numpy as np

from deep500lite.lv1.autodiff.builder import GraphBuilder, RuleContext
from deep500lite.lv1.autodiff.rules import _rule

__all__: list[str] = []

_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


def _check_supported(c: RuleContext) -> None:
    t = c.node.op_type
    if c.input(4):
        c.unsupported("sequence_lens is not supported; all sequences must have the full length",
                      f"sequence_lens input '{c.input(4)}'")
    if t == "LSTM" and c.input(7):
        c.unsupported("peephole weights (input P) are not supported", f"P input '{c.input(7)}'")
    if c.attr("layout", 0) != 0:
        c.unsupported("only layout=0 (time first) is supported", f"layout={c.attr('layout')}")
    if c.attr("clip") is not None:
        c.unsupported("the clip attribute is not supported", f"clip={c.attr('clip')}")
    if c.attr("input_forget", 0):
        c.unsupported("input_forget=1 is not supported", "input_forget=1")
    acts = [_text(a) for a in (c.attr("activations") or [])]
    ndir = 2 if _text(c.attr("direction", "forward")) == "bidirectional" else 1
    if acts and acts != _DEFAULT_ACTIVATIONS[t] * ndir:
        c.unsupported(f"only the default activations {_DEFAULT_ACTIVATIONS[t]} are supported", f"activations={acts}")
    for name in ("activation_alpha", "activation_beta"):
        if c.attr(name):
            c.unsupported(f"{name} is not supported", f"{name}={c.attr(name)}")


class _Unroller:
    """Builds one direction's unrolled forward recurrence and its backward pass."""

    def __init__(self, c: RuleContext, d: int, hidden: int, steps: int):
        self.c, self.b, self.d, self.h, self.t = c, c.b, d, hidden, steps
        self.kind = c.node.op_type
        self.gates = _GATES[self.kind]
        self.lbr = self.kind == "GRU" and bool(c.attr("linear_before_reset", 0))
        self.x = c.node.input[0]
        b, gh = self.b, self.gates * hidden
        self.w = b.op("Gather", [c.node.input[1], b.ints(d)], axis=0)  # [GH, I]
        self.r = b.op("Gather", [c.node.input[2], b.ints(d)], axis=0)  # [GH, H]
        self.one = b.scalar(1, self.x)
        xw = b.op("MatMul", [self.x, b.op("Transpose", [self.w], perm=[1, 0])])  # [T, N, GH]
        self.rb_h = None
        bias = c.input(3)
        if bias is not None:
            bd = b.op("Gather", [bias, b.ints(d)], axis=0)
            wb = b.op("Slice", [bd, b.ints([0]), b.ints([gh])])
            rb = b.op("Slice", [bd, b.ints([gh]), b.ints([2 * gh])])
            if self.lbr:  # GRU's hidden-gate recurrent bias goes inside the reset product
                self.rb_h = b.op("Slice", [rb, b.ints([2 * hidden]), b.ints([gh])])
                mask = np.concatenate([np.ones(2 * hidden), np.zeros(hidden)]).astype(c.info.np_dtype(self.x))
                rb = b.op("Mul", [rb, b.const(mask, hint="mask")])
            xw = b.op("Add", [xw, b.op("Add", [wb, rb])])
        self.xw_steps = self._steps(xw)
        self.order = list(range(steps))
        if _text(c.attr("direction", "forward")) == "reverse" or d == 1:
            self.order.reverse()

    def _steps(self, seq: str) -> list:
        """``seq`` [T, ...] split into T tensors without the time axis."""
        b = self.b
        parts = b.op("Split", [seq, b.ints([1] * self.t)], n_out=self.t, axis=0)
        parts = [parts] if isinstance(parts, str) else parts
        return [b.op("Squeeze", [p, b.ints([0])]) for p in parts]

    def _initial(self, index: int, like: str) -> str:
        b, name = self.b, self.c.input(index)
        if name is not None:
            return b.op("Gather", [name, b.ints(self.d)], axis=0)
        # Zeros of shape [N, H] for a batch size known only at run time.
        zeros = np.zeros((self.gates * self.h, self.h), self.c.info.np_dtype(self.x))
        return b.op("MatMul", [like, b.const(zeros, hint="zeros")])

    def _block(self, g: str, k: int, n: int = 1) -> str:
        b = self.b
        return b.op("Slice", [g, b.ints([k * self.h]), b.ints([(k + n) * self.h]), b.ints([1])])

    def _sig_grad(self, dy: str, y: str) -> str:  # dy * y (1 - y)
        b = self.b
        return b.op("Mul", [dy, b.op("Mul", [y, b.op("Sub", [self.one, y])])])

    def _tanh_grad(self, dy: str, y: str) -> str:  # dy (1 - y^2)
        b = self.b
        return b.op("Mul", [dy, b.op("Sub", [self.one, b.op("Mul", [y, y])])])

    def forward(self):
        """Re-run the recurrence; keeps every step's values in ``self.saved`` (by time index)."""
        b, h = self.b, self.h
        first = self.xw_steps[0]
        hprev = self._initial(5, first)
        cprev = self._initial(6, first) if self.kind == "LSTM" else None
        rt = b.op("Transpose", [self.r], perm=[1, 0])  # [H, GH]
        if self.kind == "GRU":
            rt_zr = b.op("Slice", [rt, b.ints([0]), b.ints([2 * h]), b.ints([1])])
            rt_h = b.op("Slice", [rt, b.ints([2 * h]), b.ints([3 * h]), b.ints([1])])
        self.saved = {}
        for t in self.order:
            xs, s = self.xw_steps[t], {"h_prev": hprev}
            if self.kind == "LSTM":
                g = b.op("Add", [xs, b.op("MatMul", [hprev, rt])])
                s["i"], s["o"], s["f"] = (b.op("Sigmoid", [self._block(g, k)]) for k in range(3))
                s["cc"] = b.op("Tanh", [self._block(g, 3)])
                s["c_prev"] = cprev
                cprev = b.op("Add", [b.op("Mul", [s["f"], cprev]), b.op("Mul", [s["i"], s["cc"]])])
                s["tc"] = b.op("Tanh", [cprev])
                hprev = b.op("Mul", [s["o"], s["tc"]])
            elif self.kind == "GRU":
                gzr = b.op("Add", [self._block(xs, 0, 2), b.op("MatMul", [hprev, rt_zr])])
                s["z"], s["r"] = (b.op("Sigmoid", [self._block(gzr, k)]) for k in range(2))
                if self.lbr:
                    hr = b.op("MatMul", [hprev, rt_h])
                    s["hr"] = hr if self.rb_h is None else b.op("Add", [hr, self.rb_h])
                    pre = b.op("Mul", [s["r"], s["hr"]])
                else:
                    s["rh"] = b.op("Mul", [s["r"], hprev])
                    pre = b.op("MatMul", [s["rh"], rt_h])
                s["hh"] = b.op("Tanh", [b.op("Add", [self._block(xs, 2), pre])])
                hprev = b.op("Add", [s["hh"], b.op("Mul", [s["z"], b.op("Sub", [hprev, s["hh"]])])])
            else:
                hprev = b.op("Tanh", [b.op("Add", [xs, b.op("MatMul", [hprev, rt])])])
                s["h"] = hprev
            self.saved[t] = s

    def backward(self, dy_steps, dyh, dyc):
        """Backpropagate; returns ``{"X", "W", "R", "B", "h0", "c0"}`` gradients (None where absent)."""
        b, h = self.b, self.h
        r_zr = b.op("Slice", [self.r, b.ints([0]), b.ints([2 * h])]) if self.kind == "GRU" else None
        r_h = b.op("Slice", [self.r, b.ints([2 * h]), b.ints([3 * h])]) if self.kind == "GRU" else None
        dh, dc = dyh, dyc
        dgx, dgr, rin, dgr_h, rin_h = {}, {}, {}, {}, {}
        for t in reversed(self.order):
            s = self.saved[t]
            if dy_steps is not None:
                dh = dy_steps[t] if dh is None else b.op("Add", [dh, dy_steps[t]])
            if dh is None:
                dh = b.op("Mul", [s["h_prev"], b.scalar(0, self.x)])
            if self.kind == "LSTM":
                dcell = self._tanh_grad(b.op("Mul", [dh, s["o"]]), s["tc"])
                dcell = dcell if dc is None else b.op("Add", [dc, dcell])
                dpi = self._sig_grad(b.op("Mul", [dcell, s["cc"]]), s["i"])
                dpo = self._sig_grad(b.op("Mul", [dh, s["tc"]]), s["o"])
                dpf = self._sig_grad(b.op("Mul", [dcell, s["c_prev"]]), s["f"])
                dpc = self._tanh_grad(b.op("Mul", [dcell, s["i"]]), s["cc"])
                g = b.op("Concat", [dpi, dpo, dpf, dpc], axis=1)
                dgx[t] = dgr[t] = g
                rin[t] = s["h_prev"]
                dc = b.op("Mul", [dcell, s["f"]])
                dh = b.op("MatMul", [g, self.r])
            elif self.kind == "GRU":
                z, r, hh, hp = s["z"], s["r"], s["hh"], s["h_prev"]
                dpz = self._sig_grad(b.op("Mul", [dh, b.op("Sub", [hp, hh])]), z)
                dph = self._tanh_grad(b.op("Mul", [dh, b.op("Sub", [self.one, z])]), hh)
                direct = b.op("Mul", [dh, z])
                if self.lbr:
                    dpr = self._sig_grad(b.op("Mul", [dph, s["hr"]]), r)
                    dgr[t] = b.op("Concat", [dpz, dpr, b.op("Mul", [dph, r])], axis=1)
                    rin[t] = hp
                    dh = b.op("Add", [direct, b.op("MatMul", [dgr[t], self.r])])
                else:
                    drh = b.op("MatMul", [dph, r_h])
                    dpr = self._sig_grad(b.op("Mul", [drh, hp]), r)
                    dzr = b.op("Concat", [dpz, dpr], axis=1)
                    dgr[t], rin[t], dgr_h[t], rin_h[t] = dzr, hp, dph, s["rh"]
                    dh = b.op("Sum", [direct, b.op("Mul", [drh, r]), b.op("MatMul", [dzr, r_zr])])
                dgx[t] = b.op("Concat", [dpz, dpr, dph], axis=1)
            else:
                g = self._tanh_grad(dh, s["h"])
                dgx[t] = dgr[t] = g
                rin[t] = s["h_prev"]
                dh = b.op("MatMul", [g, self.r])
        return self._parameter_grads(dgx, dgr, rin, dgr_h, rin_h, dh, dc)

    def _stack(self, per_step: dict) -> str:
        b = self.b
        return b.op("Concat", [b.unsqueeze(per_step[t], [0]) for t in range(self.t)], axis=0)

    def _outer(self, grads: dict, inputs: dict, width: int, depth: int) -> str:
        """``sum_t grads[t]^T @ inputs[t]`` ([width, depth])."""
        b = self.b
        g = b.op("Reshape", [self._stack(grads), b.ints([-1, width])])
        x = b.op("Reshape", [self._stack(inputs), b.ints([-1, depth])])
        return b.op("MatMul", [b.op("Transpose", [g], perm=[1, 0]), x])

    def _parameter_grads(self, dgx, dgr, rin, dgr_h, rin_h, dh0, dc0) -> dict:
        b, c, h = self.b, self.c, self.h
        gh = self.gates * h
        need = c.need + [False] * (8 - len(c.need))
        out = {"h0": dh0, "c0": dc0}
        gx = self._stack(dgx)  # [T, N, GH]
        if need[0]:
            out["X"] = b.op("MatMul", [gx, self.w])
        if need[1]:
            g = b.op("Reshape", [gx, b.ints([-1, gh])])
            xflat = b.op("Reshape", [self.x, b.ints([-1, c.info.shape(self.x)[2]])])
            out["W"] = b.op("MatMul", [b.op("Transpose", [g], perm=[1, 0]), xflat])
        if need[2]:
            if dgr_h:  # GRU with linear_before_reset=0: the hidden block multiplies r * h_prev
                out["R"] = b.op("Concat", [self._outer(dgr, rin, 2 * h, h), self._outer(dgr_h, rin_h, h, h)], axis=0)
            else:
                out["R"] = self._outer(dgr, rin, gh, h)
        if need[3]:
            dwb = b.reduce("ReduceSum", b.op("Reshape", [gx, b.ints([-1, gh])]), [0], keepdims=0)
            if dgr_h:
                dgr = {t: b.op("Concat", [dgr[t], dgr_h[t]], axis=1) for t in dgr}
            drb = b.reduce("ReduceSum", b.op("Reshape", [self._stack(dgr), b.ints([-1, gh])]), [0], keepdims=0)
            out["B"] = b.op("Concat", [dwb, drb], axis=0)
        return out


def _direction_grads(c: RuleContext, d: int, hidden: int, steps: int) -> dict:
    b = c.b
    u = _Unroller(c, d, hidden, steps)
    u.forward()
    dy_steps = None
    if c.dys and c.dys[0] is not None:  # Y: [T, D, N, H]
        dy_steps = u._steps(b.op("Gather", [c.dys[0], b.ints(d)], axis=1))
    dyh, dyc = (b.op("Gather", [c.dys[k], b.ints(d)], axis=0) if len(c.dys) > k and c.dys[k] is not None else None
                for k in (1, 2))
    return u.backward(dy_steps, dyh, dyc)


def _zero_if_none(b: GraphBuilder, g, like: str) -> str:
    return g if g is not None else b.op("Mul", [like, b.scalar(0, like)])


@_rule("LSTM", "GRU", "RNN")
def _recurrent(c: RuleContext):
    _check_supported(c)
    b, x = c.b, c.node.input[0]
    xs, ws = c.info.shape(x), c.info.shape(c.node.input[1])
    if xs is None or len(xs) != 3 or xs[0] is None or xs[2] is None:
        c.unsupported("the sequence length and input size must be static (known to shape inference)",
                      f"X shape {xs}")
    hidden = c.attr("hidden_size") or (ws[1] // _GATES[c.node.op_type] if ws is not None else None)
    if not hidden:
        c.unsupported("hidden_size must be given or the weight shape static", f"W shape {ws}")
    dirs = 2 if _text(c.attr("direction", "forward")) == "bidirectional" else 1
    per_dir = [_direction_grads(c, d, hidden, xs[0]) for d in range(dirs)]
    out = [None] * len(c.node.input)

    def stacked(key):
        parts = [b.unsqueeze(p[key], [0]) for p in per_dir]
        return parts[0] if dirs == 1 else b.op("Concat", parts, axis=0)

    if c.need[0]:
        out[0] = per_dir[0]["X"] if dirs == 1 else b.op("Add", [p["X"] for p in per_dir])
    for k, key in ((1, "W"), (2, "R"), (3, "B")):
        if len(c.need) > k and c.need[k]:
            out[k] = stacked(key)
    for k, key in ((5, "h0"), (6, "c0")):
        if len(c.need) > k and c.need[k] and (key == "h0" or c.node.op_type == "LSTM"):
            for p in per_dir:
                p[key] = _zero_if_none(b, p[key], b.op("Gather", [c.node.input[k], b.ints(0)], axis=0))
            out[k] = stacked(key)
    return out
