"""The op protocol: every operation is one small class, and nothing else in the
engine knows any op by name.

Layout conventions for the batched kernels:
- a *stacked* input arrives as one array of shape ``(B, *node_shape)``: row b belongs
  to the b-th node of the batch;
- a *shared* input is the same node for every node of the batch (a parameter ``W``
  of ``W·x``, the table ``E`` of a lookup) and arrives once, with its own shape;
- elementwise ops may also receive a flat ``(N,)`` block when the batch mixes shapes,
  so their kernels must not depend on the layout.
"""
from __future__ import annotations

from typing import Any, Sequence

OPS: dict[str, "Op"] = {}


def register(cls):
    """Class decorator: instantiate the op once and put it in the registry."""
    op = cls()
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} registered twice")
    OPS[op.name] = op
    return op


# nodes of more inputs than this are "wide" (the per-instance esum of losses): the engine
# gathers all inputs of such a batch in one copy; an op with forward_ragged batches them
# whatever their number of inputs
WIDE_ARITY = 4


def prod(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def flat_order_same(shape) -> bool:
    """Row-major and column-major order of this shape agree (at most one dimension above 1),
    so a reshape or transpose keeps the memory order."""
    return sum(1 for d in shape if d > 1) <= 1


def _segment_sums(xp, v, starts):
    """Sums of the row blocks v[starts[k]:starts[k+1]] (NumPy). reduceat over axis 0 runs its
    inner loop down a column per segment (about 2.5 ns an element here); a contiguous block's
    sum(axis=0) adds whole rows, so when the repeated segments are few next to the elements,
    one sum per repeated segment is 2-3x faster (a 16384-lookup minibatch over 1000 words:
    14 -> 7 ms)."""
    n = v.shape[0]
    ends = xp.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1] = n
    multi = xp.flatnonzero(ends - starts > 1)
    if multi.shape[0] * 1024 > v.size:       # many short repeats: one reduceat is cheaper
        return xp.add.reduceat(v, starts, axis=0)
    out = v.take(starts, axis=0)
    for k, s, e in zip(multi.tolist(), starts[multi].tolist(), ends[multi].tolist()):
        v[s:e].sum(axis=0, out=out[k])
    return out


# elements of a sorted gradient taken and summed at a time: the rows of one chunk are summed
# while they are in cache (reordering a whole 16384x256 minibatch first streams 16 MB out to
# memory and back in: Tree-FC's 16384 lookups over 1000 words, 8.5 -> about 4 ms a minibatch);
# a gradient that fits in L2 (a Tree-LSTM minibatch's 1136 leaves) is reordered whole
_SUM_CHUNK = 1 << 16
_SUM_WHOLE = 1 << 19


def _sorted_segment_sums(xp, vals, order, starts):
    """_segment_sums of vals.take(order) (rows sorted by table row; starts: where each row's
    run begins), a chunk of whole runs at a time."""
    n = order.shape[0]
    if vals.size <= _SUM_WHOLE:
        return _segment_sums(xp, vals.take(order, axis=0), starts)
    m = starts.shape[0]
    out = xp.empty((m,) + vals.shape[1:], dtype=vals.dtype)
    # the first run starting at or after each multiple of the chunk's rows
    step = max(1, _SUM_CHUNK * n // vals.size)
    cuts = xp.unique(xp.searchsorted(starts, xp.arange(0, n, step))).tolist()
    cuts = [c for c in cuts if c < m] + [m]
    bounds = starts.tolist() + [n]
    for a, b in zip(cuts, cuts[1:]):
        lo, hi = bounds[a], bounds[b]
        out[a:b] = _segment_sums(xp, vals.take(order[lo:hi], axis=0), starts[a:b] - lo)
    return out


def _row_order(xp, rows):
    """argsort(rows, kind="stable"): table rows below 2**16 as uint16 take NumPy's radix
    sort (0.76 -> 0.11 ms for 16384 rows)."""
    if xp.__name__ == "numpy" and rows.shape[0] and 0 <= int(rows.min()) and int(rows.max()) < 1 << 16:
        return xp.argsort(rows.astype(xp.uint16), kind="stable")
    return xp.argsort(rows, kind="stable")


def _scattered_sums(xp, v, seg, m):
    """Sums of the rows of v by segment number seg (0..m-1) in one scatter kernel: CuPy's
    segmented sum (it has no reduceat, or none this project has run)."""
    import cupyx
    out = xp.zeros((m,) + v.shape[1:], dtype=v.dtype)
    cupyx.scatter_add(out, seg, v)
    return out


def ragged_sums(xp, x, counts: list):
    """(B, *shape) sums of the consecutive row blocks of x (N, *shape), of counts[k] rows each
    (all at least 1)."""
    if xp.__name__ == "numpy":
        starts = [0]
        for c in counts[:-1]:
            starts.append(starts[-1] + c)
        return _segment_sums(xp, x, xp.asarray(starts))
    return _scattered_sums(xp, x, xp.repeat(xp.arange(len(counts)), xp.asarray(counts)), len(counts))


class RowGrad:
    """A sparse gradient for a shared table: ``grad[rows[k]] += vals[k]``.

    Lookups return this instead of a dense (V, d) array, so that one batched
    lookup costs O(B·d) in backward, not O(V·d), and sparse updates know which
    rows were touched.
    """

    __slots__ = ("rows", "vals")

    def __init__(self, rows, vals):
        self.rows = rows
        self.vals = vals

    def summed(self, xp) -> "RowGrad":
        """The same gradient with each row once: duplicates summed by one sort and one
        segmented sum (a minibatch looks up frequent words thousands of times, and an
        unbuffered indexed add over every lookup is the slow part of its backward)."""
        rows, vals = self.rows, self.vals
        if rows.shape[0] < 2:
            return self
        order = _row_order(xp, rows)
        r = rows[order]
        starts = xp.flatnonzero(xp.concatenate((xp.ones(1, dtype=bool), r[1:] != r[:-1])))
        if starts.shape[0] == r.shape[0]:
            return self
        if hasattr(xp.add, "reduceat"):
            sums = _sorted_segment_sums(xp, vals, order, starts)
        else:                               # CuPy: no reduceat; segment ids and one scatter-add
            seg = xp.cumsum(xp.concatenate((xp.zeros(1, dtype=xp.int64), (r[1:] != r[:-1]).astype(xp.int64))))
            sums = _scattered_sums(xp, vals[order], seg, starts.shape[0])
        return RowGrad(r[starts], sums)


class ProductGrad:
    """The gradient of a shared input as a product ``lhsᵀ·rhs`` (lhs (B, m), rhs (B, n)): what
    W·x returns for W. The engine may add up the products of many small batches of one
    parameter as ONE GEMM over their stacked rows (rows are what small GEMMs lack);
    ``dense()`` is the plain gradient."""

    __slots__ = ("lhs", "rhs")

    def __init__(self, lhs, rhs):
        self.lhs = lhs
        self.rhs = rhs

    def dense(self):
        return self.lhs.T @ self.rhs


class Op:
    """Base class. Subclasses set the class attributes and override the methods.

    name        -- unique op name (also the gradcheck table key)
    shared      -- indices of inputs that are shared across the batch; the engine
                   puts their node ids into the signature, all others are stacked
    elementwise -- the signature ignores shapes and the kernel accepts flat blocks
    heavy       -- agenda tie-break: cheap ops run before heavy ones at equal priority
    batchable   -- False: every node runs alone
    differentiable -- False: backward is never called (inputs, constants)
    has_data    -- nodes carry per-node data (an index, a vector) that the kernel
                   receives as a list of length B; it is not part of the signature
    redraws     -- the node's data is a random seed, drawn again when its graph is
                   invalidated (DyNet recomputes dropout masks on every full forward)
    """

    name = "?"
    has_view = False      # set for subclasses that define view()
    has_into = False      # set for subclasses that define forward_into()
    has_stacked = False   # set for subclasses that define forward_stacked()
    has_ragged = False    # set for subclasses that define forward_ragged()
    shared: tuple[int, ...] = ()
    elementwise = False
    heavy = False
    batchable = True
    differentiable = True
    has_data = False
    redraws = False
    broadcasts = False    # an elementwise operator that broadcasts like DyNet's (api_dims.py)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.has_view = cls.view is not Op.view
        cls.has_into = cls.forward_into is not Op.forward_into
        cls.has_stacked = cls.forward_stacked is not Op.forward_stacked
        cls.has_ragged = cls.forward_ragged is not Op.forward_ragged

    def shared_of(self, n_inputs: int) -> tuple[int, ...]:
        """Which inputs are shared, for a node with n_inputs inputs."""
        return self.shared

    def shape(self, shapes: Sequence[tuple], attr: Any) -> tuple:
        """Output shape from input shapes; raise ShapeError on a mismatch."""
        raise NotImplementedError

    def sig(self, shapes: Sequence[tuple], attr: Any) -> Any:
        """The hashable part of the signature beyond the op and shared-input ids."""
        if self.elementwise:
            return attr
        return (tuple(shapes), attr)

    def forward(self, xp, xs: list, attr: Any, data: list | None):
        """Batched forward over B nodes: returns an array (B, *out_shape) (or a flat
        block of the same layout as the inputs for elementwise ops)."""
        raise NotImplementedError

    def forward_into(self, xp, xs: list, attr: Any, data: list | None, out) -> None:
        """forward() written into ``out``, the batch's own block of the engine's memory (or
        of a dynamic tensor), shaped as forward() would return it: the op's result then
        costs no copy and no temporary. Optional; an op that defines it may inherit a
        forward() that allocates ``out`` (see ``elementwise.Unary``)."""
        raise NotImplementedError

    def view(self, shapes: Sequence[tuple], attr: Any):
        """Whether a node's output can be its inputs' own memory (no kernel, no copy, and no
        backward: gradients then land where the inputs' gradients live). Returns None, or
        pieces ((j, delta), ...): the output is the block of out-size elements that starts
        at offset(input j) + delta, and the engine uses it only when that start is the same
        for every listed input (a concatenation of blocks that already lie end to end, a
        contiguous slice of one block)."""
        return None

    def backward(self, xp, xs: list, y, gy, attr: Any, data: list | None) -> list:
        """One gradient per input (same layout as the input; shared inputs get the
        gradient summed over the batch, or a RowGrad), None where not needed."""
        raise NotImplementedError

    # --- optional: batches of wide nodes ------------------------------------------------
    def forward_stacked(self, xp, x, attr: Any, data: list | None, out) -> None:
        """forward_into() of B nodes of n same-shape inputs each, all in one (B, n, *shape)
        block x (how the engine gathers such a batch: an esum of many losses): one kernel over
        the block instead of one per input. Optional; backward_stacked goes with it."""
        raise NotImplementedError

    def backward_stacked(self, xp, x, y, gy, attr: Any, data: list | None):
        """The gradients of forward_stacked's inputs as one array shaped like x (a
        broadcast view will do: the engine only reads it)."""
        raise NotImplementedError

    def forward_ragged(self, xp, x, counts: list, attr: Any, data: list | None, out) -> None:
        """forward_stacked() of B wide nodes whose numbers of inputs differ: x (N, *shape)
        holds node 0's counts[0] inputs, then node 1's, ...; out is (B, *shape). An op that
        defines it batches wide nodes whatever their number of inputs (the signature then
        leaves it out: the esums of losses of sentences of every length are one batch).
        Optional; needs forward_stacked and backward_ragged."""
        raise NotImplementedError

    def backward_ragged(self, xp, x, y, gy, counts: list, attr: Any, data: list | None):
        """The gradients of forward_ragged's inputs as one array shaped like x."""
        raise NotImplementedError

    # --- optional: what the vertex engine (vertex/) may do with an op -------------------
    def c_expr(self, a: list, attr: Any) -> str | None:
        """The forward of one element as a C expression of the operands' expressions a
        (T: the element type), for CuPy kernels that fuse runs of elementwise ops; None:
        not fusable (the default), also for attributes the expression cannot carry."""
        return None

    # an op that fuses an activation into its output (ops/fused.py) sets this to a method
    # (xp, y, gy, inplace) -> the gradient before the activation; the vertex engine applies it
    # once to the output's gradient block, and input_grads, param_grads and grad_into take that
    grad_prologue = None

    def input_grads(self, xp, xs: list, gy, attr: Any, needs: list) -> list | None:
        """backward() without the shared inputs' gradients (None in their place), for ops
        whose shared-input gradients are sums over rows that param_grads can compute later
        over many batches' rows at once; None: not split (the default). needs[j]: whether
        input j needs a gradient."""
        return None

    def param_grads(self, xp, xs: list, gy, attr: Any, needs: list) -> list:
        """The shared-input gradients that input_grads left out (None elsewhere), over the
        rows of xs and gy, which may be many batches stacked."""
        raise NotImplementedError

    def grad_into_inputs(self, shapes: Sequence[tuple], is_param: Sequence[bool]):
        """The inputs j whose gradients grad_into writes in place, for inputs of these
        per-vertex shapes (is_param[j]: input j is a parameter), as a set; None where it does
        not apply (the default). The other inputs' gradients then come from param_grads."""
        return None

    def grad_into(self, xp, xs: list, y, gy, attr: Any, j: int, out) -> None:
        """The gradient of input j written into ``out`` (its block of the vertex engine's
        gradient memory, or a scratch block the engine then adds there), without temporaries
        where the formula allows: backward() would return a fresh array for the engine to copy."""
        raise NotImplementedError


def stacked_inputs(shapes, is_param):
    """grad_into_inputs of an elementwise op: every input, where none is a parameter."""
    return None if any(is_param) else set(range(len(shapes)))


class ShapeError(ValueError):
    """Raised by shape rules; the graph adds the op, shapes and user line."""
