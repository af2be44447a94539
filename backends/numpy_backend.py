"""NumPy backend: gathers are one take, scatters one indexed add.

Blocks whose offsets are multiples of their size (the executor aligns batch outputs
so that they are) are moved as whole rows of a (len/size, size) view: the index is
B row numbers instead of B·size element numbers, and take copies rows with memcpy. A block
made of aligned smaller blocks (a concatenation of two children's states lying side by side)
moves as those rows."""
from __future__ import annotations

import math

import numpy as np


# below this many elements np.add.at (about 8.5 ns an element) beats add_rows' sort and segmented
# sum (about 19 us, then little more an element): 256 rows of 4, 13 against 28 us; 31 rows of
# 1024, 268 against 40 us
_FEW_ELEMENTS = 4096


def _add_distinct(a, idx, vals):
    """a[idx] += vals for rows idx that do not repeat: take, add, put, the same three passes as
    a[idx] += vals, but take and put skip the general fancy-index machinery (8.1 -> 7.3 us for
    86 rows of 256)."""
    rows = a.take(idx, axis=0) if idx.ndim == 1 else a[idx]
    rows += vals
    a[idx] = rows


class NumpyBackend:
    name = "numpy"
    xp = np

    def __init__(self):
        self._ar = {}

    def arange(self, n: int):
        a = self._ar.get(n)
        if a is None:
            a = self._ar[n] = np.arange(n, dtype=np.intp)
        return a

    def index(self, offsets, size: int):
        """(B, size) flat indices of B blocks of `size` elements starting at offsets."""
        return np.asarray(offsets, dtype=np.intp)[:, None] + self.arange(size)

    def ragged_index(self, offsets, sizes):
        """Flat indices of blocks of different sizes (a mixed-shape elementwise batch),
        built in one vectorised step rather than one arange per node."""
        o = np.asarray(offsets, dtype=np.intp)
        s = np.asarray(sizes, dtype=np.intp)
        return np.repeat(o - (np.cumsum(s) - s), s) + np.arange(int(s.sum()), dtype=np.intp)

    def _blocks(self, offsets, size):
        """The blocks' index, which gather hands back for scatter_add: row numbers (B,) of a
        (len/size, size) view when every offset is a multiple of size; else, when they are
        all multiples of a divisor d of size, the k = size/d row numbers of each block in a
        (len/d, d) view, (B, k) (a 512-float concatenation at a multiple of 256: its two
        rows, 5x faster to take and add than 512 element numbers); else the blocks' first
        element numbers as a column (B, 1)."""
        o = np.asarray(offsets, dtype=np.intp)
        q, r = np.divmod(o, size)            # one ufunc call: 2 us less than % then //
        if not r.any():
            return q
        d = math.gcd(size, int(np.gcd.reduce(r)))
        if d > 1:
            return (o // d)[:, None] + self.arange(size // d)
        return o[:, None]

    def _view(self, buf, index, size):
        """(view of buf, index into it) for an index from _blocks (or ragged_index, size 1)."""
        if index.ndim == 1:
            n = buf.shape[0] // size
            return buf[:n * size].reshape(n, size), index    # a view (np's as_strided costs 7 us)
        k = index.shape[1]
        if k > 1:                             # rows of a divisor of size
            d = size // k
            n = buf.shape[0] // d
            return buf[:n * d].reshape(n, d), index.reshape(-1)
        return buf, index + self.arange(size)

    def gather(self, buf, offsets, size: int):
        """Copy B scattered blocks into one contiguous (B, size) array (sparse→dense); returns
        it and the blocks' index, for a scatter_add to the same blocks (backward's, which then
        skips the conversion and the alignment test)."""
        index = self._blocks(offsets, size)
        view, idx = self._view(buf, index, size)
        if idx.ndim == 2:
            return view.take(idx), index
        return view.take(idx, axis=0).reshape(len(index), size), index

    def scatter_add(self, buf, index, size: int, vals, unique: bool):
        """buf[block k] += vals[k] for B blocks (dense→sparse), index from gather (or
        ragged_index, with size 1); `unique` says no block repeats, which allows the
        buffered (fast) indexed add."""
        view, idx = self._view(buf, index, size)
        vals = vals.reshape(idx.shape + view.shape[1:])
        if unique:
            _add_distinct(view, idx, vals)
        elif view.ndim == 1 or vals.size < _FEW_ELEMENTS:
            # element numbers (blocks that overlap in part: np.add.at's one-dimensional loop is
            # fast), or few elements
            np.add.at(view, idx, vals)
        else:
            # blocks that repeat (one node read by several nodes of a batch: a query dotted
            # with every key) are rows that repeat: summed first, as add_rows does, where
            # np.add.at takes about a microsecond a row
            self.add_rows(view, idx.reshape(-1), vals)

    def add_rows(self, table, rows, vals):
        """table[rows[k]] += vals[k], rows may repeat: repeated rows are summed first (one sort
        and a segmented sum), then one take, add and put over distinct rows. np.add.at costs
        about a microsecond a row here (23 us for a sentence's 20 words, against 3)."""
        rows = np.asarray(rows, dtype=np.intp)
        n = len(rows)
        vals = vals.reshape((n,) + table.shape[1:])
        if n and rows.min() < 0:            # -1 and V-1 are one row: count them as one
            rows = rows % table.shape[0]
        # a set finds repeats in a short list faster than the sort that summed() starts with
        if n >= 512 or n > 1 and len(set(rows.tolist())) < n:
            from autobatch.ops.base import RowGrad
            g = RowGrad(rows, vals).summed(np)
            rows, vals = g.rows, g.vals
        _add_distinct(table, rows, vals)

    def to_host(self, a):
        return np.asarray(a)

    def synchronize(self):
        pass
