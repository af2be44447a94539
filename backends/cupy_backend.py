"""CuPy backend: the same op classes run on device arrays (``xp`` is ``cupy``); the
executor's copies between scattered arena blocks and contiguous batch blocks are
hand-written CUDA kernels, one launch per batch whatever the number of nodes.

Nothing here synchronises with the host: offsets are uploaded with one asynchronous
host→device copy per batch (CuPy stages through pinned memory); gather hands the device
copy back, and backward's scatter_add of the same blocks takes it instead of uploading again. Memory comes from
CuPy's default pool; ``peak_bytes()`` reports its high-water mark for the bench.

Importing this module never imports CuPy; constructing ``CupyBackend`` does, and
raises one RuntimeError saying what to install when CuPy or a CUDA device is missing."""
from __future__ import annotations

import numpy as np

INSTALL_HINT = "pip install -e '.[cuda]' (CuPy for CUDA 12) on a machine with an NVIDIA GPU"

# One thread per element with a grid-stride loop. Element t of the batch block is
# element j = t % size of block k = t / size; block k starts at offs[k]·stride in buf
# (stride is 1 for arena blocks, the row length for add_rows into a table).
# T is replaced by the C type; 64-bit indices because arenas can exceed 2^31 elements.
_HEAD = r'''
extern "C" __global__ void NAME(BUFQ T* __restrict__ buf, const long long* __restrict__ offs,
                                VALQ T* __restrict__ blk, const long long size,
                                const long long stride, const long long n) {
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (long long)blockDim.x * gridDim.x) {
        const long long k = t / size;
        const long long at = offs[k] * stride + (t - k * size);
        BODY
    }
}
'''

# sparse→dense: blk[t] = buf[at]
_GATHER = ("ab_gather", "const", "", "blk[t] = buf[at];")
# dense→sparse with accumulation: atomics make repeated blocks (a node used twice by
# one batch) correct without a uniqueness test. double atomicAdd needs sm_60+.
_SCATTER_ADD = ("ab_scatter_add", "", "const", "atomicAdd(buf + at, blk[t]);")
# dense→sparse when the caller guarantees distinct blocks: a plain read-modify-write.
_SCATTER_ADD_UNIQUE = ("ab_scatter_add_unique", "", "const", "buf[at] += blk[t];")

KERNELS = {k[0]: k for k in (_GATHER, _SCATTER_ADD, _SCATTER_ADD_UNIQUE)}
CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def kernel_source(kind: str, dtype) -> tuple[str, str]:
    """(CUDA C source, kernel name) of copy kernel `kind` for float32/float64."""
    name, bufq, valq, body = KERNELS[kind]
    ctype = CTYPES[np.dtype(dtype)]
    fname = f"{name}_{ctype}"
    src = (_HEAD.replace("NAME", fname).replace("BUFQ", bufq).replace("VALQ", valq)
           .replace("BODY", body).replace("T*", ctype + "*"))
    return src, fname


def _import_cupy():
    try:
        import cupy
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        raise RuntimeError(f"the 'cupy' backend needs CuPy, which could not be imported "
                           f"({type(e).__name__}: {e}); {INSTALL_HINT}") from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:   # no driver, driver too old, ...
        raise RuntimeError(f"the 'cupy' backend needs a CUDA device, but CuPy cannot use one "
                           f"({type(e).__name__}: {e}); {INSTALL_HINT}") from None
    if n < 1:
        raise RuntimeError(f"the 'cupy' backend needs a CUDA device, and none is visible; {INSTALL_HINT}")
    return cupy


class CupyBackend:
    name = "cupy"
    THREADS = 256
    MAX_BLOCKS = 65535

    def __init__(self):
        cp = _import_cupy()
        self.xp = cp
        self.pool = cp.get_default_memory_pool()
        self._kernels: dict = {}
        self._ar: dict = {}
        self._peak = 0

    # --- kernels --------------------------------------------------------------
    def _kernel(self, kind, dtype):
        """RawKernel for (kind, dtype), created once; CuPy compiles it on first launch
        and caches the binary on disk, so later processes skip NVRTC too."""
        key = (kind, np.dtype(dtype))
        k = self._kernels.get(key)
        if k is None:
            src, fname = kernel_source(kind, dtype)
            k = self._kernels[key] = self.xp.RawKernel(src, fname)
        return k

    def _launch(self, kind, buf, offs_dev, blk, size, stride):
        n = blk.size
        if n == 0:
            return
        grid = min((n + self.THREADS - 1) // self.THREADS, self.MAX_BLOCKS)
        self._kernel(kind, buf.dtype)((grid,), (self.THREADS,),
                                      (buf, offs_dev, blk, np.int64(size), np.int64(stride), np.int64(n)))
        used = self.pool.used_bytes()
        if used > self._peak:
            self._peak = used

    def _device_offsets(self, offsets):
        """int64 device array of offsets: device arrays (an index from gather or
        ragged_index) pass through; host offsets are uploaded."""
        cp = self.xp
        if isinstance(offsets, cp.ndarray):
            return offsets if offsets.dtype == cp.int64 else offsets.astype(cp.int64)
        return cp.asarray(np.asarray(offsets, dtype=np.int64))

    def _flat(self, a):
        """A contiguous 1-D view of an arena (the kernels address it flat)."""
        if not a.flags.c_contiguous:
            raise ValueError("CupyBackend copy kernels need a C-contiguous buffer")
        return a.reshape(-1)

    # --- the backend protocol (same as NumpyBackend) ---------------------------
    def arange(self, n: int):
        a = self._ar.get(n)
        if a is None:
            a = self._ar[n] = self.xp.arange(n, dtype=self.xp.int64)
        return a

    def index(self, offsets, size: int):
        """(B, size) flat device indices of B blocks of `size` elements at offsets."""
        return self._device_offsets(offsets)[:, None] + self.arange(size)

    def ragged_index(self, offsets, sizes):
        """Flat indices of blocks of different sizes, built on the host and uploaded
        in one copy (instead of one arange launch per node)."""
        o = np.asarray(offsets, dtype=np.int64)
        s = np.asarray(sizes, dtype=np.int64)
        starts = np.cumsum(s) - s
        return self.xp.asarray(np.repeat(o - starts, s) + np.arange(int(s.sum()), dtype=np.int64))

    def gather(self, buf, offsets, size: int):
        """Copy B scattered blocks of `size` elements into one contiguous (B, size) array;
        returns it and the blocks' index (the uploaded offsets), for a scatter_add to the
        same blocks (backward's, which then uploads nothing)."""
        cp = self.xp
        offs = self._device_offsets(offsets)
        out = cp.empty((offs.shape[0], size), dtype=buf.dtype)
        self._launch("ab_gather", self._flat(buf), offs, out, size, 1)
        return out, offs

    def scatter_add(self, buf, index, size: int, vals, unique: bool):
        """buf[block k] += vals[k] for B blocks, index from gather (or ragged_index, with
        size 1); atomics unless `unique` says no block repeats."""
        cp = self.xp
        offs = self._device_offsets(index)
        vals = cp.ascontiguousarray(vals, dtype=buf.dtype)
        kind = "ab_scatter_add_unique" if unique else "ab_scatter_add"
        self._launch(kind, self._flat(buf), offs, vals, size, 1)

    def add_rows(self, table, rows, vals):
        """table[rows[k]] += vals[k]; rows may repeat (atomics). One launch."""
        cp = self.xp
        rows = self._device_offsets(rows)
        d = table[0].size if table.ndim > 1 else 1
        vals = cp.ascontiguousarray(vals, dtype=table.dtype)
        self._launch("ab_scatter_add", self._flat(table), rows, vals, d, d)

    def to_host(self, a):
        """NumPy copy (a device→host transfer, which waits for the device)."""
        if isinstance(a, self.xp.ndarray):
            return self.xp.asnumpy(a)
        return np.asarray(a)

    def synchronize(self):
        """Wait for queued kernels: call before reading a timer."""
        self.xp.cuda.get_current_stream().synchronize()

    # --- memory, for the bench ---------------------------------------------------
    def peak_bytes(self) -> int:
        """High-water mark of device memory held by CuPy's pool since the last
        reset_peak(): the larger of the pool's reserved bytes (the pool keeps freed
        blocks, so its size is the peak working set plus rounding) and the used
        bytes sampled at each copy-kernel launch."""
        return max(self._peak, int(self.pool.total_bytes()))

    def reset_peak(self) -> None:
        """Return cached blocks to the device and restart the high-water mark."""
        self.synchronize()
        self.pool.free_all_blocks()
        self._peak = int(self.pool.used_bytes())
