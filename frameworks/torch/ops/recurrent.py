"""Recurrent operators as torch functions: RNN, GRU, LSTM (directions, layouts, sequence_lens,
peepholes, activations).

Converters follow the contract of :mod:`deep500lite.frameworks.torch.ops`.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from deep500lite.frameworks.torch.ops._common import registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter (``NodeSpec -> function of tensors``) of this family."""
_op = registrar(CONVERTERS)


_ACTIVATIONS = {
    "sigmoid": lambda a, b: torch.sigmoid,
    "tanh": lambda a, b: torch.tanh,
    "relu": lambda a, b: torch.relu,
    "affine": lambda a, b: (lambda x: a * x + b),
    "leakyrelu": lambda a, b: (lambda x: F.leaky_relu(x, a)),
    "thresholdedrelu": lambda a, b: (lambda x: torch.where(x > a, x, torch.zeros_like(x))),
    "scaledtanh": lambda a, b: (lambda x: a * torch.tanh(b * x)),
    "hardsigmoid": lambda a, b: (lambda x: torch.clamp(a * x + b, 0, 1)),
    "elu": lambda a, b: (lambda x: F.elu(x, a)),
    "softsign": lambda a, b: (lambda x: x / (1 + x.abs())),
    "softplus": lambda a, b: F.softplus,
}
_ACT_DEFAULT_ALPHA = {"leakyrelu": 0.01, "thresholdedrelu": 1.0, "hardsigmoid": 0.2, "elu": 1.0,
                      "affine": 1.0, "scaledtanh": 1.0}
_ACT_DEFAULT_BETA = {"hardsigmoid": 0.5, "affine": 0.0, "scaledtanh": 1.0}


def _rnn_activations(spec, defaults, num_dir):
    names = spec.attr("activations") or defaults * num_dir
    alphas, betas = list(spec.attr("activation_alpha") or []), list(spec.attr("activation_beta") or [])
    acts = []
    for i, name in enumerate(names):
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise spec.unsupported(f"activation {name!r}")
        a = alphas[i] if i < len(alphas) else _ACT_DEFAULT_ALPHA.get(key, 0.0)
        b = betas[i] if i < len(betas) else _ACT_DEFAULT_BETA.get(key, 0.0)
        acts.append(_ACTIVATIONS[key](a, b))
    if len(acts) == len(defaults) and num_dir == 2:
        acts = acts * 2
    n = len(defaults)
    return [acts[d * n:(d + 1) * n] for d in range(num_dir)]


def _reverse_index(seq_len, lens, device):
    """Per (t, batch) the time step to read for a reverse pass honouring ``sequence_lens``."""
    t = torch.arange(seq_len, device=device).unsqueeze(1)
    lens = lens.to(torch.int64).unsqueeze(0)
    return torch.where(t < lens, lens - 1 - t, t)


def _recurrent(spec, gates: int, defaults, cell):
    """Shared driver of RNN, GRU and LSTM: layouts, directions, sequence_lens and states.

    ``cell(x_t, states, R, Rb, P, acts) -> states`` computes one step from the projected input
    ``x_t = X_t @ W^T + Wb``; ``states[0]`` is the hidden state.
    """
    direction = spec.attr("direction", "forward")
    num_dir = 2 if direction == "bidirectional" else 1
    hidden = spec.attr("hidden_size")
    layout = spec.attr("layout", 0)
    acts = _rnn_activations(spec, defaults, num_dir)
    n_states = 2 if spec.op == "LSTM" else 1

    def run(x, w, r, b=None, seq_lens=None, h0=None, *rest):
        c0 = rest[0] if rest else None
        p = rest[1] if len(rest) > 1 else None
        if layout:
            x = x.transpose(0, 1)
            h0 = None if h0 is None else h0.transpose(0, 1)
            c0 = None if c0 is None else c0.transpose(0, 1)
        seq, batch = x.shape[0], x.shape[1]
        hs = hidden or r.shape[-1]
        ys, finals = [], []
        mask = None
        if seq_lens is not None:
            mask = (torch.arange(seq, device=x.device).unsqueeze(1) < seq_lens.to(torch.int64).unsqueeze(0))
            mask = mask.unsqueeze(-1)  # (seq, batch, 1)
        for d in range(num_dir):
            reverse = direction == "reverse" or d == 1
            xd = x
            if reverse:
                if seq_lens is None:
                    xd = x.flip(0)
                else:
                    idx = _reverse_index(seq, seq_lens, x.device)
                    xd = torch.gather(x, 0, idx.unsqueeze(-1).expand_as(x))
            wb = b[d, :gates * hs] if b is not None else 0
            rb = b[d, gates * hs:] if b is not None else 0
            xw = torch.matmul(xd, w[d].t()) + wb
            zeros = torch.zeros(batch, hs, dtype=x.dtype, device=x.device)
            states = [h0[d] if h0 is not None else zeros]
            if n_states == 2:
                states.append(c0[d] if c0 is not None else zeros)
            pd = p[d] if p is not None else None
            outs = []
            for t in range(seq):
                new = cell(xw[t], states, r[d], rb, pd, acts[d])
                if mask is not None:
                    m = mask[t]
                    new = [torch.where(m, n, s) for n, s in zip(new, states)]
                    outs.append(torch.where(m, new[0], torch.zeros_like(new[0])))
                else:
                    outs.append(new[0])
                states = new
            y = torch.stack(outs) if outs else torch.zeros(0, batch, hs, dtype=x.dtype, device=x.device)
            if reverse:
                if seq_lens is None:
                    y = y.flip(0)
                else:
                    y = torch.gather(y, 0, idx.unsqueeze(-1).expand_as(y))
            ys.append(y)
            finals.append(states)
        y = torch.stack(ys, 1)  # (seq, num_dir, batch, hidden)
        h_n = torch.stack([f[0] for f in finals])
        results = [y, h_n]
        if n_states == 2:
            results.append(torch.stack([f[1] for f in finals]))
        if layout:
            results = [y.permute(2, 0, 1, 3)] + [s.transpose(0, 1) for s in results[1:]]
        results = results[:spec.n_outputs]
        return results[0] if spec.n_outputs == 1 else tuple(results)
    return run


@_op("RNN")
def _rnn(spec):
    clip = spec.attr("clip")

    def cell(xw, states, r, rb, p, acts):
        g = xw + states[0] @ r.t() + rb
        if clip is not None:
            g = g.clamp(-clip, clip)
        return [acts[0](g)]
    return _recurrent(spec, 1, ["Tanh"], cell)


@_op("GRU")
def _gru(spec):
    clip = spec.attr("clip")
    before_reset = spec.attr("linear_before_reset", 0)

    def cell(xw, states, r, rb, p, acts):
        f, g = acts
        h = states[0]
        hs = h.shape[-1]
        xz, xr, xh = xw.split(hs, -1)
        rz, rr, rh = r.split(hs, 0)
        if isinstance(rb, torch.Tensor):
            bz, br, bh = rb.split(hs, -1)
        else:
            bz = br = bh = 0
        cz, cr = xz + h @ rz.t() + bz, xr + h @ rr.t() + br
        if clip is not None:
            cz, cr = cz.clamp(-clip, clip), cr.clamp(-clip, clip)
        z, rg = f(cz), f(cr)
        if before_reset:
            ch = xh + rg * (h @ rh.t() + bh)
        else:
            ch = xh + (rg * h) @ rh.t() + bh
        if clip is not None:
            ch = ch.clamp(-clip, clip)
        return [(1 - z) * g(ch) + z * h]
    return _recurrent(spec, 3, ["Sigmoid", "Tanh"], cell)


@_op("LSTM")
def _lstm(spec):
    clip = spec.attr("clip")
    input_forget = spec.attr("input_forget", 0)

    def cell(xw, states, r, rb, p, acts):
        f, g, hact = acts
        h, c = states
        gates = xw + h @ r.t() + rb
        if clip is not None:
            gates = gates.clamp(-clip, clip)
        i, o, fg, cc = gates.chunk(4, -1)
        if p is not None:
            pi, po, pf = p.chunk(3)
            i, fg = i + pi * c, fg + pf * c
        i = f(i)
        fg = 1 - i if input_forget else f(fg)
        c_new = fg * c + i * g(cc)
        if p is not None:
            o = o + po * c_new
        return [f(o) * hact(c_new), c_new]
    return _recurrent(spec, 4, ["Sigmoid", "Tanh", "Tanh"], cell)
