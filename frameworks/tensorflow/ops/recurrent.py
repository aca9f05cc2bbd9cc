"""Recurrent operators as TensorFlow ops: LSTM, GRU, RNN (directions, layouts, sequence_lens,
peepholes, activations), run over time with ``tf.scan``.

Converters follow the contract of :mod:`deep500lite.frameworks.tensorflow.ops` (layout kinds:
:mod:`deep500lite.frameworks.tensorflow.ops._common`).
"""

from __future__ import annotations

import tensorflow as tf

from deep500lite.errors import UnsupportedOperatorError
from deep500lite.frameworks.tensorflow.ops._common import registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict = {}
"""ONNX op type -> (layout kind, converter) of this family."""
op = registrar(CONVERTERS)


def _activation(name, alpha=None, beta=None):
    name = name.lower()
    if name == "sigmoid":
        return tf.sigmoid
    if name == "tanh":
        return tf.tanh
    if name == "relu":
        return tf.nn.relu
    if name == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda t: tf.clip_by_value(a * t + b, 0, 1)
    if name == "affine":
        return lambda t: (1.0 if alpha is None else alpha) * t + (0.0 if beta is None else beta)
    if name == "leakyrelu":
        return lambda t: tf.nn.leaky_relu(t, 0.01 if alpha is None else alpha)
    if name == "thresholdedrelu":
        return lambda t: tf.where(t > (1.0 if alpha is None else alpha), t, tf.zeros_like(t))
    if name == "scaledtanh":
        return lambda t: (1.0 if alpha is None else alpha) * tf.tanh((1.0 if beta is None else beta) * t)
    if name == "elu":
        return lambda t: tf.where(t < 0, (1.0 if alpha is None else alpha) * (tf.exp(t) - 1), t)
    if name == "softsign":
        return tf.math.softsign
    if name == "softplus":
        return tf.math.softplus
    raise UnsupportedOperatorError(
        "Unknown RNN activation. Allowed values are 'Sigmoid', 'Tanh', 'Relu', 'HardSigmoid', 'Affine', 'LeakyRelu', "
        f"'ThresholdedRelu', 'ScaledTanh', 'Elu', 'Softsign', 'Softplus' (any case). Received: {name!r}")


def _rnn_activations(ctx, defaults):
    names = ctx.get("activations")
    dirs = 2 if ctx.get("direction", "forward") == "bidirectional" else 1
    names = list(names) if names else defaults * dirs
    alphas = list(ctx.get("activation_alpha") or [])
    betas = list(ctx.get("activation_beta") or [])
    acts = []
    for i, nm in enumerate(names):
        acts.append(_activation(nm, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None))
    k = len(defaults)
    return [acts[d * k:(d + 1) * k] for d in range(dirs)]


def _run_rnn(ctx, x, seq_lens, init_states, step, n_states):
    """Run ``step`` over time for every direction; returns Y [T, D, N, H] and final states."""
    direction = ctx.get("direction", "forward")
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    t_len = tf.shape(x)[0]
    ys, finals = [], [[] for _ in range(n_states)]
    for d, dname in enumerate(dirs):
        states0 = tuple(s[d] for s in init_states)
        if seq_lens is not None:
            lens = tf.cast(seq_lens, tf.int32)
            tidx = tf.range(t_len)
            if dname == "reverse":
                xs = tf.reverse_sequence(x, lens, seq_axis=0, batch_axis=1)
            else:
                xs = x
            mask = tf.cast(tidx[:, None] < lens[None, :], x.dtype)[:, :, None]
        else:
            xs = tf.reverse(x, [0]) if dname == "reverse" else x
            mask = None

        def body(carry, inp, d=d, mask=mask):
            xt, mt = inp
            new = step(d, xt, carry)
            if mt is not None:
                new = tuple(mt * a + (1 - mt) * b for a, b in zip(new, carry))
                return new
            return new

        if mask is None:
            seq = tf.scan(lambda c, xt, d=d: step(d, xt, c), xs, initializer=states0)
            h_seq = seq[0]
        else:
            seq = tf.scan(lambda c, inp: body(c, inp), (xs, mask), initializer=states0)
            h_seq = seq[0] * mask
        finals_d = [s[-1] for s in seq]
        if dname == "reverse":
            h_seq = tf.reverse_sequence(h_seq, tf.cast(seq_lens, tf.int32), seq_axis=0, batch_axis=1) \
                if seq_lens is not None else tf.reverse(h_seq, [0])
        ys.append(h_seq)
        for i in range(n_states):
            finals[i].append(finals_d[i])
    y = tf.stack(ys, axis=1)
    return y, [tf.stack(f, axis=0) for f in finals]


def _rnn_prepare(ctx, x, w, initial, n_states, hidden):
    layout = ctx.get("layout", 0)
    if layout:
        x = tf.transpose(x, [1, 0, 2])
        initial = [None if s is None else tf.transpose(s, [1, 0, 2]) for s in initial]
    dirs = w.shape[0]
    batch = tf.shape(x)[1]
    states = [tf.zeros(tf.stack([dirs, batch, hidden]), x.dtype) if s is None else s for s in initial]
    return x, states, layout


def _rnn_finish(ctx, y, finals, layout):
    if layout:
        y = tf.transpose(y, [2, 0, 1, 3])
        finals = [tf.transpose(f, [1, 0, 2]) for f in finals]
    return [y] + finals


@op("LSTM")
def _lstm(ctx, x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None):
    hidden = ctx.get("hidden_size") or r.shape[-1]
    clip = ctx.get("clip")
    couple = ctx.get("input_forget", 0)
    acts = _rnn_activations(ctx, ["Sigmoid", "Tanh", "Tanh"])
    x, (h0, c0), layout = _rnn_prepare(ctx, x, w, [h0, c0], 2, hidden)
    bias = None if b is None else b[:, :4 * hidden] + b[:, 4 * hidden:]

    def step(d, xt, carry):
        h, c = carry
        gates = tf.matmul(xt, w[d], transpose_b=True) + tf.matmul(h, r[d], transpose_b=True)
        if bias is not None:
            gates = gates + bias[d]
        gi, go, gf, gc = tf.split(gates, 4, axis=-1)
        f, g, hact = acts[d]
        if p is not None:
            pi, po, pf = tf.split(p[d], 3)
            gi = gi + pi * c
            gf = gf + pf * c
        if clip is not None:
            gi, gf, gc = (tf.clip_by_value(t, -clip, clip) for t in (gi, gf, gc))
        i_ = f(gi)
        f_ = 1 - i_ if couple else f(gf)
        c_new = f_ * c + i_ * g(gc)
        if p is not None:
            go = go + po * c_new
        if clip is not None:
            go = tf.clip_by_value(go, -clip, clip)
        h_new = f(go) * hact(c_new)
        return h_new, c_new

    y, finals = _run_rnn(ctx, x, seq_lens, [h0, c0], step, 2)
    return _rnn_finish(ctx, y, finals, layout)


@op("GRU")
def _gru(ctx, x, w, r, b=None, seq_lens=None, h0=None):
    hidden = ctx.get("hidden_size") or r.shape[-1]
    clip = ctx.get("clip")
    lbr = ctx.get("linear_before_reset", 0)
    acts = _rnn_activations(ctx, ["Sigmoid", "Tanh"])
    x, (h0,), layout = _rnn_prepare(ctx, x, w, [h0], 1, hidden)
    if b is None:
        b = tf.zeros(tf.stack([tf.shape(w)[0], 6 * hidden]), x.dtype)

    def step(d, xt, carry):
        (h,) = carry
        f, g = acts[d]
        wb, rb = b[d, :3 * hidden], b[d, 3 * hidden:]
        xw = tf.matmul(xt, w[d], transpose_b=True) + wb
        xz, xr, xh = tf.split(xw, 3, axis=-1)
        rz, rr, rh = tf.split(r[d], 3, axis=0)
        bz, br, bh = tf.split(rb, 3)
        gz = xz + tf.matmul(h, rz, transpose_b=True) + bz
        gr = xr + tf.matmul(h, rr, transpose_b=True) + br
        if clip is not None:
            gz, gr = tf.clip_by_value(gz, -clip, clip), tf.clip_by_value(gr, -clip, clip)
        z, rt = f(gz), f(gr)
        if lbr:
            gh = xh + rt * (tf.matmul(h, rh, transpose_b=True) + bh)
        else:
            gh = xh + tf.matmul(rt * h, rh, transpose_b=True) + bh
        if clip is not None:
            gh = tf.clip_by_value(gh, -clip, clip)
        ht = g(gh)
        return ((1 - z) * ht + z * h,)

    y, finals = _run_rnn(ctx, x, seq_lens, [h0], step, 1)
    return _rnn_finish(ctx, y, finals, layout)


@op("RNN")
def _simple_rnn(ctx, x, w, r, b=None, seq_lens=None, h0=None):
    hidden = ctx.get("hidden_size") or r.shape[-1]
    clip = ctx.get("clip")
    acts = _rnn_activations(ctx, ["Tanh"])
    x, (h0,), layout = _rnn_prepare(ctx, x, w, [h0], 1, hidden)
    bias = None if b is None else b[:, :hidden] + b[:, hidden:]

    def step(d, xt, carry):
        (h,) = carry
        g = tf.matmul(xt, w[d], transpose_b=True) + tf.matmul(h, r[d], transpose_b=True)
        if bias is not None:
            g = g + bias[d]
        if clip is not None:
            g = tf.clip_by_value(g, -clip, clip)
        return (acts[d][0](g),)

    y, finals = _run_rnn(ctx, x, seq_lens, [h0], step, 1)
    return _rnn_finish(ctx, y, finals, layout)
