"""Products. ``W·x`` with a shared W is the op that batching is really for: the
stacked x's become one matrix and the batch costs one GEMM."""
from __future__ import annotations

from .base import Op, ProductGrad, ShapeError, flat_order_same, register


def _mv_shape(name, w, x):
    if len(w) != 2 or len(x) not in (1, 2) or w[1] != x[0]:
        raise ShapeError(f"{name}: cannot multiply {w} by {x} "
                         f"(needs W of shape (m, n) and x of shape (n,) or (n, k))")
    return (w[0],) + x[1:]


# Batches of up to this many rows take W·Xᵀ (see _wx). With W out of cache, as it is in a
# real pass (each W is read once per batch, between other batches' W's), X·Wᵀ is 5-25%
# faster from 128 rows on, W·Xᵀ 10-30% faster below 50, about even in between (W of 256x256
# to 1024x256); with W in cache the switch would be at 256 rows.
_SMALL = 96


def _wx(xp, w, x):
    """W (m,n) times a stack X (B,n) or (B,n,k)."""
    if x.ndim == 2:
        if x.shape[0] <= _SMALL and xp.__name__ == "numpy":
            # OpenBLAS runs W·Xᵀ (big operand on the left, no transposed W) 1.2-2x faster
            # than X·Wᵀ for small batches; the transposed result is copied into the arena anyway
            return (w @ x.T).T
        return x @ w.T
    return xp.matmul(w, x)


def _wx_into(xp, w, x, out):
    """out = W·X for a stack X, with out the batch's block: for the sizes where _wx returns
    a transposed product that block costs one copy either way; for the others none."""
    if x.ndim == 2 and (x.shape[0] > _SMALL or xp.__name__ != "numpy"):
        xp.matmul(x, w.T, out=out)
    elif x.ndim == 2:
        out[...] = _wx(xp, w, x)
    else:
        xp.matmul(w, x, out=out)


def _wx_backward(xp, w, x, gy):
    """Gradients of W·X for shared W: gW summed over the batch in one GEMM (a ProductGrad,
    which the engine may merge with other batches' into one bigger GEMM)."""
    if x.ndim == 2:
        return ProductGrad(gy, x), gy @ w
    b, n, k = x.shape
    gw = gy.transpose(1, 0, 2).reshape(gy.shape[1], b * k) @ x.transpose(0, 2, 1).reshape(b * k, n)
    return gw, xp.matmul(w.T, gy)


def _vector_inputs(shapes, is_param, js):
    """grad_into_inputs of the products: inputs js (the x's, a computed c) where they are
    stacked vectors, one GEMM per product as param_grads assumes."""
    js = set(js)
    return js if all(len(shapes[j]) == 1 and not is_param[j] for j in js) else None


def _product_grad_into(xp, xs, gy, j, out):
    """grad_into of the products: x_j's gradient gy·W_j (W_j = xs[j-1]); j = 0 is
    matmul_add's c, whose gradient is gy."""
    if j == 0:
        out[...] = gy
    else:
        xp.matmul(gy, xs[j - 1], out=out)


@register
class MatMulShared(Op):
    """W·x where W is one node for the whole batch (a parameter)."""
    name = "matmul_shared"
    shared = (0,)
    heavy = True
    fuses_out = True      # backward reads no output: an activation may overwrite it (fused.py)
    with_bias = "affine"  # W·x + b for a parameter b is one node over (b, W, x) (fused.py SUMS)

    def shape(self, shapes, attr):
        return _mv_shape(self.name, shapes[0], shapes[1])

    def forward(self, xp, xs, attr, data):
        return _wx(xp, xs[0], xs[1])

    def backward(self, xp, xs, y, gy, attr, data):
        gw, gx = _wx_backward(xp, xs[0], xs[1], gy)
        return [gw, gx]

    def input_grads(self, xp, xs, gy, attr, needs):
        if xs[1].ndim != 2:
            return None
        return [None, gy @ xs[0] if needs[1] else None]

    def param_grads(self, xp, xs, gy, attr, needs):
        return [gy.T @ xs[1] if needs[0] else None, None]

    def grad_into_inputs(self, shapes, is_param):
        return _vector_inputs(shapes, is_param, (1,))

    def grad_into(self, xp, xs, y, gy, attr, j, out):
        _product_grad_into(xp, xs, gy, j, out)


@register
class MatMul(Op):
    """A·x with a different A per node: a batched matmul (dimension-sensitive signature)."""
    name = "matmul"
    heavy = True

    def shape(self, shapes, attr):
        a, x = shapes
        if len(a) == 1 and len(x) == 2 and x[0] == 1:
            return (a[0], x[1])           # outer product u·vᵀ
        if len(a) == 1 and x == (1,):
            return a                      # DyNet: a vector (m,) is (m, 1), a (1,) is (1, 1)
        return _mv_shape(self.name, a, x)

    def forward(self, xp, xs, attr, data):
        a, x = xs
        if a.ndim == 2 and x.ndim == 2:
            return a * x                   # (B,m)·(B,1): each vector times its scalar
        if a.ndim == 2:
            return a[:, :, None] * x       # (B,m)·(B,1,k) outer products
        if x.ndim == 2:
            return xp.matmul(a, x[:, :, None])[:, :, 0]
        return xp.matmul(a, x)

    def backward(self, xp, xs, y, gy, attr, data):
        a, x = xs
        if a.ndim == 2 and x.ndim == 2:
            return [gy * x, (a * gy).sum(axis=1, keepdims=True)]
        if a.ndim == 2:
            return [(gy * x).sum(axis=2), (a[:, :, None] * gy).sum(axis=1, keepdims=True)]
        if x.ndim == 2:
            return [gy[:, :, None] * x[:, None, :], xp.matmul(a.transpose(0, 2, 1), gy[:, :, None])[:, :, 0]]
        return [xp.matmul(gy, x.transpose(0, 2, 1)), xp.matmul(a.transpose(0, 2, 1), gy)]


@register
class Affine(Op):
    """b + W1·x1 + W2·x2 + …, with b and the W's shared and the x's stacked."""
    name = "affine"
    heavy = True
    fuses_out = True      # backward reads no output: an activation may overwrite it (fused.py)

    def shared_of(self, n):
        return (0,) + tuple(range(1, n, 2))

    def shape(self, shapes, attr):
        if len(shapes) < 3 or len(shapes) % 2 == 0:
            raise ShapeError(f"affine_transform needs [b, W1, x1, W2, x2, ...], got {len(shapes)} inputs")
        b = shapes[0]
        for k in range(1, len(shapes), 2):
            out = _mv_shape("affine_transform", shapes[k], shapes[k + 1])
            if out != b:
                raise ShapeError(f"affine_transform: W{k // 2 + 1}·x{k // 2 + 1} has shape {out} "
                                 f"but b has shape {b}")
        return b

    def forward(self, xp, xs, attr, data):
        w, x = xs[1], xs[2]
        out = xp.empty((x.shape[0], w.shape[0]) + x.shape[2:], dtype=xp.result_type(w, x))
        self.forward_into(xp, xs, attr, data, out)
        return out

    def forward_into(self, xp, xs, attr, data, out):
        _wx_into(xp, xs[1], xs[2], out)
        for k in range(3, len(xs), 2):
            out += _wx(xp, xs[k], xs[k + 1])
        out += xs[0]

    def backward(self, xp, xs, y, gy, attr, data):
        out = [gy.sum(axis=0)]
        for k in range(1, len(xs), 2):
            out.extend(_wx_backward(xp, xs[k], xs[k + 1], gy))
        return out

    def input_grads(self, xp, xs, gy, attr, needs):
        if any(x.ndim != 2 for x in xs[2::2]):
            return None
        out = [None]
        for k in range(1, len(xs), 2):
            out += [None, gy @ xs[k] if needs[k + 1] else None]
        return out

    def param_grads(self, xp, xs, gy, attr, needs):
        out = [gy.sum(axis=0) if needs[0] else None]
        for k in range(1, len(xs), 2):
            out += [gy.T @ xs[k + 1] if needs[k] else None, None]
        return out

    def grad_into_inputs(self, shapes, is_param):          # [b, W1, x1, W2, x2, ...]
        return _vector_inputs(shapes, is_param, range(2, len(shapes), 2))

    def grad_into(self, xp, xs, y, gy, attr, j, out):
        _product_grad_into(xp, xs, gy, j, out)


@register
class MatMulAdd(type(Affine)):        # (register keeps instances under the class names)
    """c + W1·x1 + W2·x2 + … with c stacked (one per node) and the W's shared: what
    affine_transform([c, W, x]) makes of a c that is not a parameter. An LSTM builder uses it
    for the recurrent half of a step, c = b + W_x·x having run for all steps at once."""
    name = "matmul_add"

    def shared_of(self, n):
        return tuple(range(1, n, 2))

    def backward(self, xp, xs, y, gy, attr, data):
        grads = super().backward(xp, xs, y, gy, attr, data)
        grads[0] = gy
        return grads

    def input_grads(self, xp, xs, gy, attr, needs):
        grads = super().input_grads(xp, xs, gy, attr, needs)
        if grads is not None:
            grads[0] = gy if needs[0] else None
        return grads

    def param_grads(self, xp, xs, gy, attr, needs):
        grads = super().param_grads(xp, xs, gy, attr, needs)
        grads[0] = None
        return grads

    def grad_into_inputs(self, shapes, is_param):          # [c, W1, x1, ...]
        return _vector_inputs(shapes, is_param, range(0, len(shapes), 2))


@register
class Transpose(Op):
    """transpose(x): (m, n) -> (n, m), a vector (n,) -> (1, n); attr None. With attr a
    permutation of dimensions (DyNet's dims; x's missing trailing dimensions count as 1):
    output dimension k is input dimension attr[k]."""
    name = "transpose"

    def shape(self, shapes, attr):
        s = shapes[0]
        if attr is not None:
            if sorted(attr) != list(range(len(attr))) or len(attr) < len(s):
                raise ShapeError(f"transpose: dims {list(attr)} are not a permutation of the dimensions of {s}")
            s = s + (1,) * (len(attr) - len(s))
            return tuple(s[d] for d in attr)
        if len(s) == 1:
            return (1, s[0])
        if len(s) != 2:
            raise ShapeError(f"transpose: needs a vector or matrix, got {s} (give dims to permute more)")
        return (s[1], s[0])

    def view(self, shapes, attr):
        return ((0, 0),) if attr is None and flat_order_same(shapes[0]) else None

    def forward(self, xp, xs, attr, data):
        x = xs[0]
        if attr is not None:
            x = x.reshape(x.shape + (1,) * (len(attr) + 1 - x.ndim))
            return x.transpose((0,) + tuple(d + 1 for d in attr))
        if x.ndim == 2:
            return x.reshape(x.shape[0], 1, x.shape[1])
        return x.transpose(0, 2, 1)

    def backward(self, xp, xs, y, gy, attr, data):
        x = xs[0]
        if attr is not None:
            inverse = sorted(range(len(attr)), key=attr.__getitem__)
            return [gy.transpose((0,) + tuple(d + 1 for d in inverse)).reshape(x.shape)]
        if x.ndim == 2:
            return [gy.reshape(x.shape)]
        return [gy.transpose(0, 2, 1)]


@register
class DotProduct(Op):
    name = "dot_product"

    def shape(self, shapes, attr):
        a, b = shapes
        if a != b or len(a) != 1:
            raise ShapeError(f"dot_product: needs two vectors of equal length, got {a} and {b}")
        return (1,)

    def forward(self, xp, xs, attr, data):
        return (xs[0] * xs[1]).sum(axis=1, keepdims=True)

    def backward(self, xp, xs, y, gy, attr, data):
        return [gy * xs[1], gy * xs[0]]
