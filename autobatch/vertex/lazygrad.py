"""Lazily batched parameter gradients (Cavs §3.4).

On the gather→scatter path, a product W·x runs once per frontier; its gradient w.r.t. x is
needed right away (it flows to the children), but dW = Σ_t gy_tᵀ x_t is not. So per frontier
only gx = gy·W is computed (op.input_grads), and after the last frontier dW = gyᵀ·x runs ONCE
over the whole dynamic tensors (all frontiers are contiguous rows of the same buffers,
op.param_grads): one GEMM per use of a parameter instead of one per frontier. Ops that do
not split their backward this way run op.backward per frontier."""
from __future__ import annotations

ENABLED = True


def enabled() -> bool:
    return ENABLED

