"""Lazily batched parameter gradients (Cavs §3.4).

On the gather→scatter path, a product W·x runs once per frontier; its gradient w.r.t. x is
needed right away (it flows to the children), but dW = Σ_t gy_tᵀ x_t is not. So per frontier
only gx = gy·W is computed, and after the last frontier dW = gyᵀ·x runs ONCE over the whole
dynamic tensors (all frontiers are contiguous rows of the same buffers): one GEMM per use of
a parameter instead of one per frontier. Covers matmul_shared and affine with vector inputs
(the formulas of ops/linalg.py); anything else falls back to op.backward per frontier."""
from __future__ import annotations

ENABLED = True


def enabled() -> bool:
    return ENABLED


def input_grads(xp, op, xs, gy, attr, needs):
    """Gradients for the stacked inputs only, or None when this op is not handled."""
    if op.name == "matmul_shared" and xs[1].ndim == 2:
        return [None, gy @ xs[0] if needs[1] else None]
    if op.name == "affine" and all(x.ndim == 2 for x in xs[2::2]):
        out = [None]
        for k in range(1, len(xs), 2):
            out += [None, gy @ xs[k] if needs[k + 1] else None]
        return out
    return None


def param_grads(xp, op, xs, gy, attr, needs):
    """The shared-input gradients of an instruction deferred by input_grads, over all rows."""
    if op.name == "matmul_shared":
        return [gy.T @ xs[1] if needs[0] else None, None]
    out = [gy.sum(axis=0) if needs[0] else None]
    for k in range(1, len(xs), 2):
        out += [gy.T @ xs[k + 1] if needs[k] else None, None]
    return out
