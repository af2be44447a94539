"""NumPy backend: gathers are one take, scatters one indexed add.

Blocks whose offsets are multiples of their size (the executor aligns batch outputs
so that they are) are moved as whole rows of a (len/size, size) view: the index is
B row numbers instead of B·size element numbers, and take copies rows with memcpy."""
from __future__ import annotations

import numpy as np


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

    @staticmethod
    def _rows(buf, o, size):
        """(row view, row numbers) when every offset is a multiple of size, else None."""
        if size > 1 and not (o % size).any():
            n = buf.shape[0] // size
            return buf[:n * size].reshape(n, size), o // size    # a view (np's as_strided costs 7 us)
        return None

    def gather(self, buf, offsets, size: int):
        """Copy B scattered blocks into one contiguous (B, size) array (sparse→dense)."""
        o = np.asarray(offsets, dtype=np.intp)
        rows = self._rows(buf, o, size)
        if rows is not None:
            return rows[0].take(rows[1], axis=0)
        return buf.take(o[:, None] + self.arange(size))

    def scatter_add(self, buf, offsets, size: int, vals, unique: bool):
        """buf[block k] += vals[k] for B blocks (dense→sparse); `unique` says no
        block repeats, which allows the buffered (fast) indexed add."""
        o = np.asarray(offsets, dtype=np.intp)
        rows = self._rows(buf, o, size)
        if rows is not None:
            view, idx = rows
        else:
            view, idx = buf, o[:, None] + self.arange(size)
        vals = vals.reshape(idx.shape + view.shape[1:])
        if unique:
            view[idx] += vals
        else:
            np.add.at(view, idx, vals)

    def add_rows(self, table, rows, vals):
        """table[rows[k]] += vals[k], rows may repeat."""
        vals = vals.reshape((len(rows),) + table.shape[1:])
        if len(rows) < 512:
            np.add.at(table, rows, vals)
            return
        # many rows (a whole minibatch of lookups): equal rows summed first, then one
        # buffered add over distinct rows -- 2.5x faster than np.add.at here
        from autobatch.ops.base import RowGrad
        g = RowGrad(np.asarray(rows), vals).summed(np)
        table[g.rows] += g.vals

    def to_host(self, a):
        return np.asarray(a)

    def synchronize(self):
        pass
