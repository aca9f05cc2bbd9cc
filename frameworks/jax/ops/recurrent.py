"""Recurrent operators as JAX functions: RNN, GRU and LSTM with every direction, both layouts,
``sequence_lens``, initial states, LSTM peepholes and ``input_forget``, GRU's
``linear_before_reset``, ``clip`` and the activation functions ONNX lists.

The time loop is ``jax.lax.scan`` (one compiled step whatever the sequence length); the input
projection of all time steps is one matrix product before the loop. Converters follow the
contract of :mod:`deep500lite.frameworks.jax.ops._common`.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from deep500lite.errors import UnsupportedOperatorError
from deep500lite.frameworks.jax.ops._common import registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict[str, Callable] = {}
"""ONNX op type -> converter ``fn(ctx, *inputs)`` of this family."""
_op = registrar(CONVERTERS)


_ACTIVATIONS = {
    "sigmoid": lambda a, b: jax.nn.sigmoid,
    "tanh": lambda a, b: jnp.tanh,
    "relu": lambda a, b: jax.nn.relu,
    "affine": lambda a, b: (lambda x: a * x + b),
    "leakyrelu": lambda a, b: (lambda x: jnp.where(x >= 0, x, a * x)),
    "thresholdedrelu": lambda a, b: (lambda x: jnp.where(x > a, x, jnp.zeros_like(x))),
    "scaledtanh": lambda a, b: (lambda x: a * jnp.tanh(b * x)),
    "hardsigmoid": lambda a, b: (lambda x: jnp.clip(a * x + b, 0, 1)),
    "elu": lambda a, b: (lambda x: jnp.where(x >= 0, x, a * jnp.expm1(jnp.minimum(x, 0)))),
    "softsign": lambda a, b: (lambda x: x / (1 + jnp.abs(x))),
    "softplus": lambda a, b: jax.nn.softplus,
}
_DEFAULT_ALPHA = {"leakyrelu": 0.01, "thresholdedrelu": 1.0, "hardsigmoid": 0.2, "elu": 1.0, "affine": 1.0,
                  "scaledtanh": 1.0}
_DEFAULT_BETA = {"hardsigmoid": 0.5, "affine": 0.0, "scaledtanh": 1.0}


def _activations(ctx, defaults, num_dir):
    """Per direction, the list of activation functions (``f, g[, h]``) the node asks for."""
    names = ctx.attr("activations") or defaults * num_dir
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    acts = []
    for i, name in enumerate(names):
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise UnsupportedOperatorError(
                f"The jax executor does not support this {ctx.op} node ('{ctx.name}'); it supports the activations "
                f"{', '.join(sorted(_ACTIVATIONS))}; another executor may run it. Received: {name!r}")
        a = alphas[i] if i < len(alphas) else _DEFAULT_ALPHA.get(key, 0.0)
        b = betas[i] if i < len(betas) else _DEFAULT_BETA.get(key, 0.0)
        acts.append(_ACTIVATIONS[key](a, b))
    n = len(defaults)
    if len(acts) == n and num_dir == 2:
        acts = acts * 2
    return [acts[d * n:(d + 1) * n] for d in range(num_dir)]


def _clip(ctx):
    c = ctx.attr("clip")
    if c is None:
        return lambda v: v
    return lambda v: jnp.clip(v, -c, c)


def _run_recurrent(ctx, gates, defaults, cell, x, w, r, b, seq_lens, h0, c0=None, p=None):
    """Shared driver of RNN, GRU and LSTM: layouts, directions, ``sequence_lens`` and the states.

    ``cell(xw_t, states, r, rb, p, acts) -> states`` computes one step from the projected input
    ``xw_t = X_t @ W^T + Wb``; ``states[0]`` is the hidden state.
    """
    direction = ctx.attr("direction", "forward")
    num_dir = 2 if direction == "bidirectional" else 1
    layout = int(ctx.attr("layout", 0))
    acts = _activations(ctx, defaults, num_dir)
    n_states = 2 if ctx.op == "LSTM" else 1
    if layout:
        x = jnp.swapaxes(x, 0, 1)
        h0 = None if h0 is None else jnp.swapaxes(h0, 0, 1)
        c0 = None if c0 is None else jnp.swapaxes(c0, 0, 1)
    seq, batch = x.shape[0], x.shape[1]
    hs = int(ctx.attr("hidden_size") or r.shape[-1])
    mask = rev_index = None
    if seq_lens is not None:
        lens = jnp.asarray(seq_lens).astype(jnp.int32)
        t = jnp.arange(seq, dtype=jnp.int32)[:, None]
        mask = (t < lens[None, :])[..., None]  # (seq, batch, 1)
        # reversing only the first len steps of each sequence; the index map is its own inverse
        rev_index = jnp.where(t < lens[None, :], lens[None, :] - 1 - t, t)

    def reverse(v):
        if rev_index is None:
            return jnp.flip(v, 0)
        return jnp.take_along_axis(v, jnp.broadcast_to(rev_index[..., None], v.shape), axis=0)

    ys, finals = [], []
    for d in range(num_dir):
        backward = direction == "reverse" or d == 1
        xd = reverse(x) if backward else x
        wb = 0 if b is None else b[d, :gates * hs]
        rb = 0 if b is None else b[d, gates * hs:]
        xw = jnp.matmul(xd, jnp.swapaxes(w[d], 0, 1)) + wb
        zeros = jnp.zeros((batch, hs), dtype=x.dtype)
        states = (zeros if h0 is None else h0[d],)
        if n_states == 2:
            states += (zeros if c0 is None else c0[d],)
        rd, pd, act = r[d], None if p is None else p[d], acts[d]

        def step(carry, inp, rd=rd, rb=rb, pd=pd, act=act):
            xw_t, m_t = inp
            new = tuple(cell(xw_t, carry, rd, rb, pd, act))
            if m_t is None:
                return new, new[0]
            new = tuple(jnp.where(m_t, n, s) for n, s in zip(new, carry))
            return new, jnp.where(m_t, new[0], jnp.zeros_like(new[0]))

        final, y = jax.lax.scan(step, states, (xw, mask))
        ys.append(reverse(y) if backward else y)
        finals.append(final)
    y = jnp.stack(ys, 1)  # (seq, num_dir, batch, hidden)
    results = [y, jnp.stack([f[0] for f in finals])]
    if n_states == 2:
        results.append(jnp.stack([f[1] for f in finals]))
    if layout:
        results = [jnp.transpose(y, (2, 0, 1, 3))] + [jnp.swapaxes(s, 0, 1) for s in results[1:]]
    n_out = len(ctx.node.output)
    results = [v if name else None for v, name in zip(results[:n_out], ctx.node.output)]
    return results[0] if n_out == 1 else tuple(results)


@_op("RNN")
def _rnn(ctx, x, w, r, b=None, seq_lens=None, h0=None):
    clip = _clip(ctx)

    def cell(xw, states, r, rb, p, acts):
        return [acts[0](clip(xw + jnp.matmul(states[0], r.T) + rb))]
    return _run_recurrent(ctx, 1, ["Tanh"], cell, x, w, r, b, seq_lens, h0)


@_op("GRU")
def _gru(ctx, x, w, r, b=None, seq_lens=None, h0=None):
    clip = _clip(ctx)
    before_reset = int(ctx.attr("linear_before_reset", 0))

    def cell(xw, states, r, rb, p, acts):
        f, g = acts
        h = states[0]
        xz, xr, xh = jnp.split(xw, 3, axis=-1)
        rz, rr, rh = jnp.split(r, 3, axis=0)
        bz, br, bh = jnp.split(rb, 3, axis=-1) if not isinstance(rb, int) else (0, 0, 0)
        z = f(clip(xz + jnp.matmul(h, rz.T) + bz))
        reset = f(clip(xr + jnp.matmul(h, rr.T) + br))
        if before_reset:
            cand = xh + reset * (jnp.matmul(h, rh.T) + bh)
        else:
            cand = xh + jnp.matmul(reset * h, rh.T) + bh
        return [(1 - z) * g(clip(cand)) + z * h]
    return _run_recurrent(ctx, 3, ["Sigmoid", "Tanh"], cell, x, w, r, b, seq_lens, h0)


@_op("LSTM")
def _lstm(ctx, x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None):
    clip = _clip(ctx)
    input_forget = int(ctx.attr("input_forget", 0))

    def cell(xw, states, r, rb, p, acts):
        f, g, h_act = acts
        h, c = states
        i, o, fg, cc = jnp.split(clip(xw + jnp.matmul(h, r.T) + rb), 4, axis=-1)
        if p is not None:
            pi, po, pf = jnp.split(p, 3)
            i, fg = i + pi * c, fg + pf * c
        i = f(i)
        fg = 1 - i if input_forget else f(fg)
        c_new = fg * c + i * g(cc)
        if p is not None:
            o = o + po * c_new
        return [f(o) * h_act(c_new), c_new]
    return _run_recurrent(ctx, 4, ["Sigmoid", "Tanh", "Tanh"], cell, x, w, r, b, seq_lens, h0, c0, p)
