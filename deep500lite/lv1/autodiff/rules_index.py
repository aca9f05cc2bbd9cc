"""Level 1 autodiff: gradient rules of indexing, selection and contraction operators.

Tile, GatherND, GatherElements, ScatterND, ScatterElements, TopK, CumSum, Mod, DepthToSpace,
SpaceToDepth, Trilu, Max/Min, ReduceMax/ReduceMin, GlobalMaxPool, PRelu, Selu, Softsign,
InstanceNormalization and Einsum. The rules register
themselves in :data:`~deep500lite.lv1.autodiff.rules.RULES` when this module is imported
(:mod:`.rules` imports it at its end). Gather-like operators are differentiated by applying the
operator to the flat positions of the input (``_index_scatter``), so that repeated indices
accumulate and no operator-specific scatter is needed.
"""

from __future__ import annotations

from deep500lite.lv1.autodiff.builder import RuleContext
from deep500lite.lv1.autodiff.rules import _index_scatter, _reduce_axes, _rule
from deep500lite.lv1.autodiff.rules_nn import _standardize, _standardized_grad

__all__: list[str] = []


@_rule("Tile")
def _tile(c: RuleContext):
    reps = c.node.input[1]
    g = _index_scatter(c, c.node.input[0], lambda pos: c.b.op("Tile", [pos, reps]), c.dy(), True)
    return [g, None]


@_rule("GatherElements")
def _gather_elements(c: RuleContext):
    idx, axis = c.node.input[1], c.attr("axis", 0)
    g = _index_scatter(c, c.node.input[0], lambda pos: c.b.op("GatherElements", [pos, idx], axis=axis),
                       c.dy(), True)
    return [g, None]


@_rule("GatherND")
def _gather_nd(c: RuleContext):
    idx, bd = c.node.input[1], c.attr("batch_dims", 0)
    g = _index_scatter(c, c.node.input[0], lambda pos: c.b.op("GatherND", [pos, idx], batch_dims=bd), c.dy(), True)
    return [g, None]


def _reduction(c: RuleContext) -> str:
    r = c.attr("reduction", b"none")
    r = r.decode() if isinstance(r, bytes) else r
    if r not in ("none", "add"):
        c.unsupported("only reduction 'none' and 'add' have a gradient rule", f"reduction={r!r}")
    return r


@_rule("ScatterND")
def _scatter_nd(c: RuleContext):
    # out = data with the indexed slices replaced by (or, with reduction 'add', increased by) updates.
    b, (idx, upd), dy = c.b, c.node.input[1:3], c.dy()
    add = _reduction(c) == "add"
    out = [None, None, None]
    if c.need[0]:
        out[0] = dy if add else b.op("ScatterND", [dy, idx, b.zeros_like(upd)])
    if c.need[2]:
        out[2] = b.op("GatherND", [dy, idx])
    return out


@_rule("ScatterElements")
def _scatter_elements(c: RuleContext):
    b, (idx, upd), dy = c.b, c.node.input[1:3], c.dy()
    axis = c.attr("axis", 0)
    add = _reduction(c) == "add"
    out = [None, None, None]
    if c.need[0]:
        out[0] = dy if add else b.op("ScatterElements", [dy, idx, b.zeros_like(upd)], axis=axis)
    if c.need[2]:
        out[2] = b.op("GatherElements", [dy, idx], axis=axis)
    return out


@_rule("TopK")
def _topk(c: RuleContext):
    # The values output gathers along ``axis`` at the (distinct) indices output.
    b, x, idx = c.b, c.node.input[0], c.node.output[1]
    g = b.op("ScatterElements", [b.zeros_like(x), idx, c.dy(0)], axis=c.attr("axis", -1))
    return [g, None]


@_rule("CumSum")
def _cumsum(c: RuleContext):
    # The transpose of a running sum is the running sum in the other direction.
    reverse = 0 if c.attr("reverse", 0) else 1
    g = c.b.op("CumSum", [c.dy(), c.node.input[1]], exclusive=c.attr("exclusive", 0), reverse=reverse)
    return [g, None]


@_rule("Mod")
def _mod(c: RuleContext):
    # Floating-point Mod has fmod=1: x mod y = x - trunc(x / y) * y, trunc piecewise constant.
    b, (x, y), dy = c.b, c.node.input[:2], c.dy()
    ys = c.info.shape(c.node.output[0])
    out = [b.unbroadcast(dy, ys, x) if c.need[0] else None, None]
    if c.need[1]:
        q = b.op("Div", [x, y])
        q = b.op("Mul", [b.op("Sign", [q]), b.op("Floor", [b.op("Abs", [q])])])
        out[1] = b.unbroadcast(b.op("Neg", [b.op("Mul", [dy, q])]), ys, y)
    return out


@_rule("SpaceToDepth")
def _space_to_depth(c: RuleContext):
    # SpaceToDepth is the inverse of DepthToSpace in DCR mode (a permutation of the elements).
    return [c.b.op("DepthToSpace", [c.dy()], blocksize=c.attr("blocksize"), mode="DCR")]


@_rule("DepthToSpace")
def _depth_to_space(c: RuleContext):
    b, x, dy = c.b, c.node.input[0], c.dy()
    bs = c.attr("blocksize")
    mode = c.attr("mode", b"DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "DCR":
        return [b.op("SpaceToDepth", [dy], blocksize=bs)]
    # CRD: y = reshape(transpose(reshape(x, [n, c, bs, bs, h, w]), [0, 1, 4, 2, 5, 3]), [n, c, h*bs, w*bs])
    xs = c.info.shape(x)
    if xs is None or len(xs) != 4 or any(d is None for d in xs[1:]):
        c.unsupported("mode CRD needs the static channel and spatial sizes", f"input shape {xs}")
    n_, ch, h, w = xs
    g = b.op("Reshape", [dy, b.ints([-1, ch // (bs * bs), h, bs, w, bs])])
    g = b.op("Transpose", [g], perm=[0, 1, 3, 5, 2, 4])
    return [b.reshape_like(g, x)]


@_rule("Trilu")
def _trilu(c: RuleContext):
    # Trilu multiplies by a constant mask: the gradient is masked the same way.
    return [c.b.op("Trilu", [c.dy()] + list(c.node.input[1:2]), upper=c.attr("upper", 1)), None]


@_rule("Max", "Min")
def _max_min(c: RuleContext):
    # The gradient goes to every input equal to the result (ties are a set of measure zero).
    b, y, dy = c.b, c.node.output[0], c.dy()
    ys, zero = c.info.shape(y), c.b.scalar(0, y)
    return [b.unbroadcast(b.op("Where", [b.op("Equal", [x, y]), dy, zero]), ys, x) if need else None
            for x, need in zip(c.node.input, c.need)]


@_rule("ReduceMax", "ReduceMin")
def _reduce_max_min(c: RuleContext):
    b, x, y, dy = c.b, c.node.input[0], c.node.output[0], c.dy()
    axes = _reduce_axes(c)
    if axes is None:
        return [dy] + [None] * (len(c.node.input) - 1)
    if not c.attr("keepdims", 1):
        y, dy = b.unsqueeze(y, axes), b.unsqueeze(dy, axes)
    g = b.op("Where", [b.op("Equal", [x, y]), b.op("Expand", [dy, b.shape(x)]), b.scalar(0, x)])
    return [g] + [None] * (len(c.node.input) - 1)


@_rule("GlobalMaxPool")
def _global_max_pool(c: RuleContext):
    b, x, y = c.b, c.node.input[0], c.node.output[0]
    return [b.op("Where", [b.op("Equal", [x, y]), b.op("Expand", [c.dy(), b.shape(x)]), b.scalar(0, x)])]


@_rule("PRelu")
def _prelu(c: RuleContext):
    b, (x, slope), dy = c.b, c.node.input[:2], c.dy()
    pos, zero = b.op("Greater", [x, b.scalar(0, x)]), b.scalar(0, x)
    out = [None, None]
    if c.need[0]:
        g = b.op("Where", [pos, dy, b.op("Mul", [dy, slope])])
        out[0] = b.unbroadcast(g, c.info.shape(c.node.output[0]), x)
    if c.need[1]:
        g = b.op("Where", [pos, zero, b.op("Mul", [dy, x])])
        out[1] = b.unbroadcast(g, c.info.shape(c.node.output[0]), slope)
    return out


@_rule("Selu")
def _selu(c: RuleContext):
    # y' = gamma for x > 0, else gamma * alpha * exp(x) = y + gamma * alpha.
    b, x, y = c.b, c.node.input[0], c.node.output[0]
    alpha, gamma = c.attr("alpha", 1.67326319217681884765625), c.attr("gamma", 1.05070102214813232421875)
    d = b.op("Where", [b.op("Greater", [x, b.scalar(0, x)]), b.scalar(gamma, x),
                       b.op("Add", [y, b.scalar(gamma * alpha, x)])])
    return [b.op("Mul", [c.dy(), d])]


@_rule("Softsign")
def _softsign(c: RuleContext):
    b, x = c.b, c.node.input[0]
    den = b.op("Add", [b.scalar(1, x), b.op("Abs", [x])])
    return [b.op("Div", [c.dy(), b.op("Mul", [den, den])])]


@_rule("InstanceNormalization")
def _instance_norm(c: RuleContext):
    b, (x, scale), dy = c.b, c.node.input[:2], c.dy()
    rank = c.info.rank(x, c.node)
    axes = list(range(2, rank))
    bshape = b.ints([1, -1] + [1] * (rank - 2))
    xhat, invstd = _standardize(c, x, axes, c.attr("epsilon", 1e-5))
    out = [None, None, None]
    if c.need[0]:
        out[0] = _standardized_grad(c, b.op("Mul", [dy, b.op("Reshape", [scale, bshape])]), xhat, invstd, axes)
    if c.need[1]:
        out[1] = b.reduce("ReduceSum", b.op("Mul", [dy, xhat]), [0] + axes, keepdims=0)
    if c.need[2]:
        out[2] = b.reduce("ReduceSum", dy, [0] + axes, keepdims=0)
    return out


def _einsum_terms(c: RuleContext):
    eq = c.attr("equation")
    eq = (eq.decode() if isinstance(eq, bytes) else eq).replace(" ", "")
    if "->" not in eq:
        c.unsupported("the equation needs an explicit output ('->')", repr(eq))
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if "..." in eq:  # broadcast ellipsis dimensions would need unbroadcasting
        c.unsupported("equations with an ellipsis ('...') have no gradient rule", repr(eq))
    for t in terms:
        letters = t
        if len(set(letters)) != len(letters):
            c.unsupported("an index repeated within one operand (a diagonal) has no gradient rule", repr(eq))
    return terms, out


@_rule("Einsum")
def _einsum(c: RuleContext):
    # d operand_i = einsum(dy, the other operands -> subscripts of operand i), valid when each of
    # its indices appears in the output or in another operand.
    terms, out_t = _einsum_terms(c)
    b, dy = c.b, c.dy()
    grads = []
    for i, (x, need) in enumerate(zip(c.node.input, c.need)):
        if not need:
            grads.append(None)
            continue
        others = [t for j, t in enumerate(terms) if j != i]
        if not set(terms[i]) <= set(out_t) | set("".join(others)):
            c.unsupported(f"operand {i} has an index summed in that operand alone", repr(c.attr("equation")))
        ins = [dy] + [y for j, y in enumerate(c.node.input) if j != i]
        grads.append(b.op("Einsum", ins, equation=",".join([out_t] + others) + "->" + terms[i]))
    return grads
