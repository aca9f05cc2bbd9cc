"""Convolution, pooling and resizing operators as TensorFlow ops (channels-last): Conv, ConvTranspose,
MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, Resize.

Converters follow the contract of :mod:`deep500lite.frameworks.tensorflow.ops` (layout kinds:
:mod:`deep500lite.frameworks.tensorflow.ops._common`).
"""

from __future__ import annotations

import tensorflow as tf

from deep500lite.frameworks.tensorflow.layout import channels_last, channels_last_filter
from deep500lite.frameworks.tensorflow.ops._common import (SPATIAL, _cdiv, _dims, _lowest, _max0, _rank, _static,
                                                           registrar)

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


def _is_same_upper(pads, sizes, kernel, strides, dilations):
    """Whether static explicit ``pads`` are what ``auto_pad="SAME_UPPER"`` gives for static ``sizes``."""
    if not all(isinstance(v, int) for v in list(sizes) + [v for p in pads for v in p]):
        return False
    for (begin, end), size, k, s, d in zip(pads, sizes, kernel, strides, dilations):
        total = max((_cdiv(size, s) - 1) * s + (k - 1) * d + 1 - size, 0)
        if (begin, end) != (total // 2, total - total // 2):
            return False
    return True


def _all_zero(pads):
    return all(isinstance(v, int) and v == 0 for p in pads for v in p)


@op("Conv", kind=SPATIAL)
def _conv(ctx, x, w, b=None):
    rank = _rank(ctx, x)
    n = rank - 2
    group = ctx.get("group", 1)
    strides, dilations = _spatial_attrs(ctx, n)
    kernel = list(ctx.get("kernel_shape") or w.shape.as_list()[:-2])  # w arrives [k..., C_in / group, C_out]
    if any(k is None for k in kernel):
        ctx.fail("the kernel shape must be known", f"kernel_shape {kernel}")
    sizes = _dims(x)[1:-1]
    pads, auto = _explicit_pads(ctx, sizes, kernel, strides, dilations)
    dilated_strided = any(d > 1 for d in dilations) and any(s > 1 for s in strides)
    run_strides = [1] * n if dilated_strided else strides
    if _all_zero(pads):
        padding = "VALID"
    elif not dilated_strided and (auto == "SAME_UPPER" or _is_same_upper(pads, sizes, kernel, strides, dilations)):
        padding = "SAME"  # also for explicit pads equal to SAME's: TF's CPU kernels are 2-3x faster with "SAME"
    elif n == 2 and all(isinstance(v, int) for p in pads for v in p):
        padding = [[0, 0], list(pads[0]), list(pads[1]), [0, 0]]
    else:
        x = _pad_spatial(x, pads)
        padding = "VALID"

    def conv(xx, ww):
        if n == 2:
            return tf.nn.conv2d(xx, ww, run_strides, padding, dilations=dilations)
        return tf.nn.convolution(xx, ww, strides=run_strides, padding=padding, dilations=dilations)

    depthwise = group > 1 and n in (1, 2) and w.shape[-2] == 1
    if n == 2 and not depthwise and any(d > 1 for d in dilations):
        y = _dilated_conv2d(x if padding == "VALID" else _pad_spatial(x, pads), w, group, dilations)
    elif group == 1:
        y = conv(x, w)
    elif depthwise:
        y = _depthwise(x, w, group, kernel, run_strides, padding, pads, dilations)
    elif n == 2:
        y = _grouped_conv2d(x, w, group, run_strides, padding, dilations)
    else:
        xs = tf.split(x, group, axis=-1)
        ws = tf.split(w, group, axis=-1)
        y = tf.concat([conv(a, c) for a, c in zip(xs, ws)], axis=-1)
    if dilated_strided:
        y = y[(slice(None),) + tuple(slice(None, None, s) for s in strides)]
    if b is not None:
        y = y + b if group > 1 else tf.nn.bias_add(y, b)
    return y


_conv.weight_layout = channels_last_filter  # build_node hands w over in this layout (HWIO for 2-D)


def _dilated_conv2d(x, w, group, dilations):
    """A dilated 2-D convolution of the padded ``x``, stride 1, as ``tf.nn.convolution`` computes one:
    an undilated convolution of ``tf.space_to_batch_nd(x)`` (``tf.nn.with_space_to_batch``).

    Conv2D's own ``dilations`` run forward everywhere, but its gradient kernels on CPU refuse
    dilation rates above 1 unless oneDNN runs them (TensorFlow leaves oneDNN off on CPUs without
    AVX-512), and refuse them with explicit padding even then. Space-to-batch needs neither.
    """
    def undilated(xx, _rank, _padding):
        if group == 1:
            return tf.nn.conv2d(xx, w, 1, "VALID")
        return _grouped_conv2d(xx, w, group, [1, 1], "VALID", [1, 1])

    return tf.nn.with_space_to_batch(x, dilations, "VALID", undilated)


def _grouped_conv2d(x, w, group, strides, padding, dilations):
    """A grouped 2-D convolution: TensorFlow's native grouped Conv2D forward (filter depth
    C_in / group; about 2x faster than one convolution per group on CPU), and one backprop per
    group backward, since Conv2DBackpropFilter with groups fails on CPU for some shapes. The bias
    is added with a plain Add by the caller: the remapper would fuse a BiasAdd into a
    _FusedConv2D, which refuses groups."""

    @tf.custom_gradient
    def grouped(xx, ww):
        def grad(dy):
            xs, ws, dys = tf.split(xx, group, axis=-1), tf.split(ww, group, axis=-1), tf.split(dy, group, axis=-1)
            raw = dict(strides=[1, *strides, 1], dilations=[1, *dilations, 1], data_format="NHWC",
                       padding=padding if isinstance(padding, str) else "EXPLICIT",
                       explicit_paddings=[] if isinstance(padding, str) else [v for p in padding for v in p])
            dx = [tf.raw_ops.Conv2DBackpropInput(input_sizes=tf.shape(a), filter=c, out_backprop=d, **raw)
                  for a, c, d in zip(xs, ws, dys)]
            dw = [tf.raw_ops.Conv2DBackpropFilter(input=a, filter_sizes=tf.shape(c), out_backprop=d, **raw)
                  for a, c, d in zip(xs, ws, dys)]
            return tf.concat(dx, axis=-1), tf.concat(dw, axis=-1)

        return tf.nn.conv2d(xx, ww, strides, padding, dilations=dilations), grad

    return grouped(x, w)


def _depthwise(x, w, group, kernel, strides, padding, pads, dilations):
    """A 1-D or 2-D convolution with one input channel per group: ``w`` is [k..., 1, C_out] with
    C_out = C_in * multiplier, ``group`` = C_in; ``pads`` are applied unless ``padding`` is "VALID"."""
    if padding != "VALID":
        # DepthwiseConv2dNative's shape function aborts the process on explicit paddings: pad first.
        x = _pad_spatial(x, pads)
    n = len(kernel)
    if n == 1:  # as a 2-D convolution of height 1
        x, w = x[:, None], w[None]
        kernel, strides, dilations = [1] + kernel, [1] + list(strides), [1] + list(dilations)
    w = tf.reshape(w, kernel + [group, -1])  # [kh, kw, C_in, multiplier]: output channel c * multiplier + j
    run_strides = strides if strides[0] == strides[1] else [1, 1]  # the kernel needs equal strides
    y = tf.nn.depthwise_conv2d(x, w, [1, *run_strides, 1], "VALID", dilations=dilations)
    if run_strides != strides:
        y = y[:, ::strides[0], ::strides[1]]
    return y[:, 0] if n == 1 else y


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
    no_3d_kernel = n == 3 and x.dtype in (tf.float16, tf.float64)
    if all(d == 1 for d in dilations):
        if no_3d_kernel:
            return _pool3d_as_2d(x, kind, kernel, strides)
        f = tf.nn.max_pool if kind == "MAX" else tf.nn.avg_pool
        return f(x, kernel, strides, "VALID")
    if no_3d_kernel:
        y = tf.nn.with_space_to_batch(x, dilations, "VALID", lambda xx, _n, _p: _pool3d_as_2d(xx, kind, kernel,
                                                                                              [1, 1, 1]))
    else:
        y = tf.nn.pool(x, kernel, kind, strides=[1] * n, padding="VALID", dilations=dilations)
    if any(s > 1 for s in strides):
        y = y[(slice(None),) + tuple(slice(None, None, s) for s in strides)]
    return y


def _pool3d_as_2d(x, kind, kernel, strides):
    """A 3-D pooling without padding as two 2-D poolings, for the dtypes TensorFlow has no CPU
    MaxPool3D/AvgPool3D kernels for (float16, float64; the 2-D ones exist): the window is a box, so
    pooling over height and width, then over depth, gives the same maximum (or mean) exactly."""
    f = tf.nn.max_pool2d if kind == "MAX" else tf.nn.avg_pool2d
    n, d, c = tf.shape(x)[0], tf.shape(x)[1], tf.shape(x)[4]
    hw = f(tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0)), kernel[1:], strides[1:], "VALID")
    h, w = tf.shape(hw)[1], tf.shape(hw)[2]
    y = f(tf.reshape(hw, tf.stack([n, d, h * w, c])), [kernel[0], 1], [strides[0], 1], "VALID")
    return tf.reshape(y, tf.stack([n, tf.shape(y)[1], h, w, c]))


@op("MaxPool", kind=SPATIAL)
def _max_pool(ctx, x):
    n, kernel, strides, dilations, pads, extra = _pool_geometry(ctx, x)
    total = [(b, e + ex) for (b, e), ex in zip(pads, extra)]
    padded = _pad_spatial(x, total, _lowest(x.dtype))
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


_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                     "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_taps(ctx, ratio):
    """Interpolation weights (one per tap, last axis) at the fractional positions ``ratio`` in (0, 1]."""
    mode = ctx.get("mode", "nearest")
    if mode == "linear":
        return tf.stack([1 - ratio, ratio], -1)
    if mode == "cubic":
        a = ctx.get("cubic_coeff_a", -0.75)

        def far(t):  # weight of a tap at distance t in [1, 2]
            return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a

        def near(t):  # weight of a tap at distance t in [0, 1]
            return ((a + 2) * t - (a + 3)) * t * t + 1
        return tf.stack([far(ratio + 1), near(ratio), near(1 - ratio), far(2 - ratio)], -1)
    nearest = ctx.get("nearest_mode", "round_prefer_floor")
    up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": ratio >= 1,
          "ceil": tf.ones_like(ratio, tf.bool)}[nearest]
    up = tf.cast(up, ratio.dtype)
    return tf.stack([1 - up, up], -1)


def _resize_axis(ctx, x, axis, size_in, size_out, scale, roi):
    """Resize stored axis ``axis`` of ``x`` from ``size_in`` to ``size_out`` (scale: float64 tensor)."""
    coord = ctx.get("coordinate_transformation_mode", "half_pixel")
    y = tf.range(tf.cast(size_out, tf.float64), dtype=tf.float64)
    n_in = tf.cast(size_in, tf.float64)
    width = scale * n_in  # the output width before rounding, as ONNX defines the transforms
    single = tf.equal(width, 1.0)
    if coord == "align_corners":
        src = tf.where(single, tf.zeros_like(y), y * (n_in - 1) / (width - 1 + tf.cast(single, tf.float64)))
    elif coord == "asymmetric":
        src = y / scale
    elif coord == "tf_crop_and_resize":
        lo, hi = roi
        src = tf.where(single, tf.fill(tf.shape(y), (hi - lo) * (n_in - 1) / 2),
                       y * (hi - lo) * (n_in - 1) / (width - 1 + tf.cast(single, tf.float64)))
        src = src + lo * (n_in - 1)
    elif coord == "pytorch_half_pixel":
        src = tf.where(single, tf.fill(tf.shape(y), tf.constant(-0.5, tf.float64)), (y + 0.5) / scale - 0.5)
    elif coord == "half_pixel":
        src = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric
        offset = n_in / 2 * (1 - tf.cast(size_out, tf.float64) / width)
        src = offset + (y + 0.5) / scale - 0.5
    base = tf.math.ceil(src) - 1  # the tap left of src (src itself when src is a whole number)
    ratio = src - base
    weights = _resize_taps(ctx, ratio)
    n_taps = weights.shape[-1]
    taps = base[:, None] + tf.range(n_taps, dtype=tf.float64)[None, :] - (n_taps // 2 - 1)
    if ctx.get("exclude_outside", 0):
        inside = tf.cast(tf.logical_and(taps >= 0, taps <= n_in - 1), tf.float64)
        weights = weights * inside
        weights = weights / tf.reduce_sum(weights, -1, keepdims=True)
    taps = tf.cast(tf.clip_by_value(taps, 0, n_in - 1), tf.int64)
    dtype = x.dtype if x.dtype.is_floating else tf.float64
    gathered = tf.gather(tf.cast(x, dtype), taps, axis=axis)  # the output axis, then the taps
    rank = x.shape.rank
    shape = [1] * (rank + 1)
    shape[axis], shape[axis + 1] = -1, n_taps
    out = tf.reduce_sum(gathered * tf.reshape(tf.cast(weights, dtype), shape), axis=axis + 1)
    if coord == "tf_crop_and_resize":
        outside = tf.logical_or(src < 0, src > n_in - 1)
        shape = [1] * rank
        shape[axis] = -1
        out = tf.where(tf.reshape(outside, shape), tf.cast(ctx.get("extrapolation_value", 0.0), dtype), out)
    return out


@op("Resize", kind=SPATIAL)
def _resize(ctx, x, roi=None, scales=None, sizes=None):
    if ctx.opset < 11:
        ctx.fail("Resize is supported from opset 11", f"opset {ctx.opset}")
    mode = ctx.get("mode", "nearest")
    coord = ctx.get("coordinate_transformation_mode", "half_pixel")
    policy = ctx.get("keep_aspect_ratio_policy", "stretch")
    for name, value, allowed in (("mode", mode, ("nearest", "linear", "cubic")),
                                 ("coordinate_transformation_mode", coord, _COORDINATE_MODES),
                                 ("nearest_mode", ctx.get("nearest_mode", "round_prefer_floor"), _NEAREST_MODES),
                                 ("keep_aspect_ratio_policy", policy, ("stretch", "not_larger", "not_smaller")),
                                 ("antialias", ctx.get("antialias", 0), (0,))):
        if value not in allowed:
            ctx.fail(f"{name} must be one of {allowed}", repr(value))
    rank = _rank(ctx, x)
    axes = [a + rank if a < 0 else a for a in ctx.get("axes") or range(rank)]
    if scales is not None and scales.shape.num_elements() == 0:
        scales = None
    if sizes is not None and sizes.shape.num_elements() == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        ctx.fail("exactly one of scales and sizes must be given", "both or neither")
    stored = list(channels_last(rank)) if rank >= 3 else list(range(rank))  # plain axis -> stored axis
    dims = tf.shape(x, out_type=tf.int64)
    n_in = [dims[stored[a]] for a in axes]
    if sizes is not None:
        sizes = tf.cast(sizes, tf.int64)
        scale = [tf.cast(sizes[i], tf.float64) / tf.cast(n_in[i], tf.float64) for i in range(len(axes))]
        if policy == "stretch":
            n_out = [sizes[i] for i in range(len(axes))]
        else:
            pick = tf.reduce_min if policy == "not_larger" else tf.reduce_max
            one = pick(tf.stack(scale))
            scale = [one] * len(axes)
            n_out = [tf.cast(tf.floor(one * tf.cast(n, tf.float64) + 0.5), tf.int64) for n in n_in]
    else:
        scales = tf.cast(scales, tf.float64)
        scale = [scales[i] for i in range(len(axes))]
        n_out = [tf.cast(tf.floor(s * tf.cast(n, tf.float64)), tf.int64) for s, n in zip(scale, n_in)]
    static_scales = _static(scales) if sizes is None else None
    for i, a in enumerate(axes):
        if coord != "tf_crop_and_resize" and static_scales is not None and static_scales[i] == 1.0:
            continue  # an axis left as it is
        box = None
        if coord == "tf_crop_and_resize":
            r = tf.cast(roi, tf.float64)
            box = (r[i], r[i + len(axes)]) if ctx.get("axes") else (r[a], r[a + rank])
        x = _resize_axis(ctx, x, stored[a], n_in[i], n_out[i], scale[i], box)
    return x
