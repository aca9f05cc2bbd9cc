"""Convolution and pooling operators as TensorFlow ops (channels-last): Conv, ConvTranspose,
MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.

Converters follow the contract of :mod:`deep500lite.frameworks.tensorflow.ops` (layout kinds:
:mod:`deep500lite.frameworks.tensorflow.ops._common`).
"""

from __future__ import annotations

import tensorflow as tf

from deep500lite.frameworks.tensorflow.ops._common import SPATIAL, _cdiv, _dims, _lowest, _max0, _rank, registrar

__all__ = ["CONVERTERS"]

CONVERTERS: dict = {}
"""ONNX op type -> (layout kind, converter) of this family."""
op = registrar(CONVERTERS)


def _spatial_attrs(ctx, n):
    strides = list(ctx.get("strides") or [1] * n)
    dilations = list(ctx.get("dilations") or [1] * n)
    return strides, dilations


def _explicit_pads(ctx, sizes, kernel, strides, dilations):
    """Per spatial axis (begin, end) padding from ``auto_pad``/``pads`` (ints or tensors)."""
    n = len(sizes)
    auto = ctx.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i in range(n):
            eff = (kernel[i] - 1) * dilations[i] + 1
            total = _max0((_cdiv(sizes[i], strides[i]) - 1) * strides[i] + eff - sizes[i])
            small = total // 2
            out.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
        return out, auto
    if auto == "VALID":
        return [(0, 0)] * n, auto
    pads = list(ctx.get("pads") or [0] * (2 * n))
    return [(pads[i], pads[i + n]) for i in range(n)], auto


def _pad_spatial(x, pads, value=0):
    paddings = [[0, 0]] + [[b, e] for b, e in pads] + [[0, 0]]
    if all(isinstance(v, int) and v == 0 for p in pads for v in p):
        return x
    return tf.pad(x, paddings, constant_values=tf.cast(value, x.dtype))


def _all_zero(pads):
    return all(isinstance(v, int) and v == 0 for p in pads for v in p)


@op("Conv", kind=SPATIAL)
def _conv(ctx, x, w, b=None):
    rank = _rank(ctx, x)
    n = rank - 2
    group = ctx.get("group", 1)
    strides, dilations = _spatial_attrs(ctx, n)
    kernel = list(ctx.get("kernel_shape") or w.shape.as_list()[2:])
    if any(k is None for k in kernel):
        ctx.fail("the kernel shape must be known", f"kernel_shape {kernel}")
    w = tf.transpose(w, list(range(2, rank)) + [1, 0])  # [k..., C_in / group, C_out]
    sizes = _dims(x)[1:-1]
    pads, auto = _explicit_pads(ctx, sizes, kernel, strides, dilations)
    dilated_strided = any(d > 1 for d in dilations) and any(s > 1 for s in strides)
    run_strides = [1] * n if dilated_strided else strides
    if _all_zero(pads):
        padding = "VALID"
    elif auto == "SAME_UPPER" and not dilated_strided:
        padding = "SAME"
    elif n == 2 and all(isinstance(v, int) for p in pads for v in p):
        padding = [[0, 0], list(pads[0]), list(pads[1]), [0, 0]]
    else:
        x = _pad_spatial(x, pads)
        padding = "VALID"

    def conv(xx, ww):
        if n == 2:
            return tf.nn.conv2d(xx, ww, run_strides, padding, dilations=dilations)
        return tf.nn.convolution(xx, ww, strides=run_strides, padding=padding, dilations=dilations)

    if group == 1:
        y = conv(x, w)
    elif n == 2 and x.dtype == tf.float32:
        y = conv(x, w)  # TensorFlow runs grouped 2-D convolutions natively (filter depth C_in / group)
    else:
        xs = tf.split(x, group, axis=-1)
        ws = tf.split(w, group, axis=-1)
        y = tf.concat([conv(a, c) for a, c in zip(xs, ws)], axis=-1)
    if dilated_strided:
        y = y[(slice(None),) + tuple(slice(None, None, s) for s in strides)]
    if b is not None:
        y = tf.nn.bias_add(y, b)
    return y


def _dilate_kernel(w, dilations, n):
    """Insert zeros between kernel taps (w is [k..., a, b])."""
    for i, d in enumerate(dilations):
        if d == 1:
            continue
        k = w.shape[i]
        idx = tf.range(k) * d
        moved = tf.experimental.numpy.moveaxis(w, i, 0)
        full_shape = tf.concat([[(k - 1) * d + 1], tf.shape(moved)[1:]], 0)
        dil = tf.scatter_nd(idx[:, None], moved, full_shape)
        w = tf.experimental.numpy.moveaxis(dil, 0, i)
    return w


@op("ConvTranspose", kind=SPATIAL)
def _conv_transpose(ctx, x, w, b=None):
    rank = _rank(ctx, x)
    n = rank - 2
    group = ctx.get("group", 1)
    strides, dilations = _spatial_attrs(ctx, n)
    kernel = list(ctx.get("kernel_shape") or w.shape.as_list()[2:])
    out_pad = list(ctx.get("output_padding") or [0] * n)
    w = tf.transpose(w, list(range(2, rank)) + [1, 0])  # [k..., C_out / group, C_in]
    w = _dilate_kernel(w, dilations, n)
    eff = [(kernel[i] - 1) * dilations[i] + 1 for i in range(n)]
    sizes = _dims(x)[1:-1]
    full = [strides[i] * (sizes[i] - 1) + out_pad[i] + eff[i] for i in range(n)]
    auto = ctx.get("auto_pad", "NOTSET")
    out_shape = ctx.get("output_shape")
    out_shape = None if out_shape is None else list(out_shape)[-n:]
    if "pads" not in ctx.attrs and auto in ("SAME_UPPER", "SAME_LOWER"):
        target = out_shape or [sizes[i] * strides[i] for i in range(n)]
        total = [full[i] - target[i] for i in range(n)]
        if auto == "SAME_UPPER":
            pads = [(t // 2, t - t // 2) for t in total]
        else:
            pads = [(t - t // 2, t // 2) for t in total]
        out_shape = None
    else:
        p = list(ctx.get("pads") or [0] * (2 * n))
        pads = [(p[i], p[i + n]) for i in range(n)]
    batch = tf.shape(x)[0]
    cout_g = w.shape[-2]

    def deconv(xx, ww):
        # Extra output_padding rows lie beyond the last input tap; compute without them, pad after.
        shape = [batch] + [full[i] - out_pad[i] for i in range(n)] + [cout_g]
        y = tf.nn.conv_transpose(xx, ww, tf.stack(shape) if not all(isinstance(s, int) for s in shape)
                                 else shape, strides=strides, padding="VALID")
        if any(out_pad):
            y = tf.pad(y, [[0, 0]] + [[0, p] for p in out_pad] + [[0, 0]])
        return y

    if group == 1:
        y = deconv(x, w)
    else:
        y = tf.concat([deconv(a, c) for a, c in zip(tf.split(x, group, axis=-1), tf.split(w, group, axis=-1))],
                      axis=-1)
    if not _all_zero(pads):
        y = y[(slice(None),) + tuple(slice(bb, full[i] - e) for i, (bb, e) in enumerate(pads))]
    if out_shape is not None:
        # The output_shape attribute without auto_pad: the result is cropped or zero-extended at the end.
        have = [full[i] - pads[i][0] - pads[i][1] for i in range(n)]
        y = y[(slice(None),) + tuple(slice(0, o) for o in out_shape)]
        y = tf.pad(y, [[0, 0]] + [[0, _max0(o - h)] for o, h in zip(out_shape, have)] + [[0, 0]])
    if b is not None:
        y = tf.nn.bias_add(y, b)
    return y


def _pool_geometry(ctx, x):
    rank = _rank(ctx, x)
    n = rank - 2
    kernel = list(ctx.get("kernel_shape"))
    strides, dilations = _spatial_attrs(ctx, n)
    sizes = _dims(x)[1:-1]
    pads, auto = _explicit_pads(ctx, sizes, kernel, strides, dilations)
    extra = [0] * n
    if ctx.get("ceil_mode", 0) and auto not in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        for i in range(n):
            eff = (kernel[i] - 1) * dilations[i] + 1
            span = sizes[i] + pads[i][0] + pads[i][1] - eff
            out = _cdiv(span, strides[i]) + 1
            if isinstance(out, int):
                if (out - 1) * strides[i] >= sizes[i] + pads[i][0]:
                    out -= 1
            else:
                out = tf.where((out - 1) * strides[i] >= sizes[i] + pads[i][0], out - 1, out)
            extra[i] = _max0((out - 1) * strides[i] + eff - sizes[i] - pads[i][0] - pads[i][1])
    return n, kernel, strides, dilations, pads, extra


def _run_pool(x, kind, kernel, strides, dilations, n):
    if all(d == 1 for d in dilations):
        f = tf.nn.max_pool if kind == "MAX" else tf.nn.avg_pool
        return f(x, kernel, strides, "VALID")
    y = tf.nn.pool(x, kernel, kind, strides=[1] * n, padding="VALID", dilations=dilations)
    if any(s > 1 for s in strides):
        y = y[(slice(None),) + tuple(slice(None, None, s) for s in strides)]
    return y


@op("MaxPool", kind=SPATIAL)
def _max_pool(ctx, x):
    n, kernel, strides, dilations, pads, extra = _pool_geometry(ctx, x)
    total = [(b, e + ex) for (b, e), ex in zip(pads, extra)]
    padded = _pad_spatial(x, total, _lowest(x.dtype))
    if x.dtype == tf.float64 and n == 3:
        y = tf.cast(_run_pool(tf.cast(padded, tf.float32), "MAX", kernel, strides, dilations, n), x.dtype)
    else:
        y = _run_pool(padded, "MAX", kernel, strides, dilations, n)
    if ctx.n_outputs < 2:
        return y
    if n != 2 or any(d != 1 for d in dilations):
        ctx.fail("the Indices output needs a 2-D pooling without dilations",
                 f"{n} spatial dimensions, dilations {list(dilations)}")
    _, idx = tf.nn.max_pool_with_argmax(padded, kernel, strides, "VALID", output_dtype=tf.int64)
    shp = tf.shape(padded, out_type=tf.int64)
    wp, c = shp[2], shp[3]
    h, w = tf.shape(x, out_type=tf.int64)[1], tf.shape(x, out_type=tf.int64)[2]
    ch = idx % c
    pix = idx // c
    yy, xx = pix // wp - pads[0][0], pix % wp - pads[1][0]
    nn = tf.range(tf.shape(x, out_type=tf.int64)[0])[:, None, None, None]
    if ctx.get("storage_order", 0):
        flat = ((nn * c + ch) * w + xx) * h + yy
    else:
        flat = ((nn * c + ch) * h + yy) * w + xx
    return y, flat


@op("AveragePool", kind=SPATIAL)
def _avg_pool(ctx, x):
    n, kernel, strides, dilations, pads, extra = _pool_geometry(ctx, x)
    if _all_zero(pads) and all(isinstance(e, int) and e == 0 for e in extra):
        return _run_pool(x, "AVG", kernel, strides, dilations, n)
    total = [(b, e + ex) for (b, e), ex in zip(pads, extra)]
    include = ctx.get("count_include_pad", 0)
    mask = tf.ones(tf.concat([[1], tf.shape(x)[1:-1], [1]], 0), x.dtype)
    if include:
        mask = _pad_spatial(mask, pads, 1)
        mask = _pad_spatial(mask, [(0, e) for e in extra], 0)
    else:
        mask = _pad_spatial(mask, total, 0)
    s = _run_pool(_pad_spatial(x, total, 0), "AVG", kernel, strides, dilations, n)
    cnt = _run_pool(mask, "AVG", kernel, strides, dilations, n)
    return s / cnt


@op("GlobalAveragePool", kind=SPATIAL)
def _global_avg_pool(ctx, x):
    return tf.reduce_mean(x, axis=list(range(1, _rank(ctx, x) - 1)), keepdims=True)


@op("GlobalMaxPool", kind=SPATIAL)
def _global_max_pool(ctx, x):
    return tf.reduce_max(x, axis=list(range(1, _rank(ctx, x) - 1)), keepdims=True)
