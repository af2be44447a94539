"""NumPy backend: gathers are one take, scatters one indexed add.

Blocks whose offsets are multiples of their size (the executor aligns batch outputs
so that they are) are moved as whole rows of a (len/size, size) view: the index is
B row numbers instead of B·size element numbers, and take copies rows with memcpy."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np


class NumpyBackend:
    name = "numpy"
    xp = np

    OFFSET_CACHE = 2048      # index arrays kept, keyed by the offsets list's identity

    def __init__(self):
        self._ar = {}
        self._idx: OrderedDict = OrderedDict()

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

    def _index(self, buf, offsets, size):
        """(view of buf, index into it) addressing the blocks: row numbers of a (len/size, size)
        view when every offset is a multiple of size, else (B, size) element numbers. A list's
        index is cached by identity (the executor keeps forward's gather list for backward's
        scatter, and the cache holds it alive, so its id cannot be reused while cached): the
        scatter then skips the conversion and the alignment test."""
        hit = self._idx.get(id(offsets)) if type(offsets) is list else None
        if hit is not None and hit[0] is offsets and hit[1] == size:
            rows, idx = hit[2], hit[3]
        else:
            o = np.asarray(offsets, dtype=np.intp)
            q, r = np.divmod(o, size)            # one ufunc call: 2 us less than % then //
            rows = size > 1 and not r.any()
            idx = q if rows else o               # element numbers are not kept: B·size of them
            if type(offsets) is list:
                self._idx[id(offsets)] = (offsets, size, rows, idx)
                if len(self._idx) > self.OFFSET_CACHE:
                    self._idx.popitem(last=False)
        if rows:
            n = buf.shape[0] // size
            return buf[:n * size].reshape(n, size), idx    # a view (np's as_strided costs 7 us)
        return buf, idx[:, None] + self.arange(size)

    def forget_offsets(self):
        """A graph was released: its offsets lists will not come back. Dropping them at once
        keeps thousands of lists from staying alive (and walked by the cycle collector)
        through the next graph's build."""
        self._idx.clear()

    def gather(self, buf, offsets, size: int):
        """Copy B scattered blocks into one contiguous (B, size) array (sparse→dense)."""
        view, idx = self._index(buf, offsets, size)
        return view.take(idx, axis=0) if idx.ndim == 1 else view.take(idx)

    def scatter_add(self, buf, offsets, size: int, vals, unique: bool):
        """buf[block k] += vals[k] for B blocks (dense→sparse); `unique` says no
        block repeats, which allows the buffered (fast) indexed add."""
        view, idx = self._index(buf, offsets, size)
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
