"""Trainers with DyNet's update rules, clipping and sparse lookup updates.

``update()`` (1) collects the parameters to update (``updated`` True; for lookup
tables under sparse updates only the rows that got gradient, all rows when the table
was used densely), (2) rescales by DyNet's global-norm clipping, (3) applies the
rule, (4) zeroes the gradients. Arrays are those of each parameter's backend
(``p.xp``: NumPy or CuPy); the only host transfer is the gradient norm."""
from __future__ import annotations

import math
import sys
import warnings
from typing import Optional

import numpy as np

from .conversions import number, real
from .errors import NonFiniteError, user_line
from .params import Parameter, ParameterCollection

__all__ = ["Trainer", "SimpleSGDTrainer", "CyclicalSGDTrainer", "MomentumSGDTrainer", "AdagradTrainer",
           "AdadeltaTrainer", "RMSPropTrainer", "AdamTrainer", "AmsgradTrainer"]


def _num(owner, what: str, v) -> float:
    return number(f"{owner}: {what}", v)


class Trainer:
    """Base class. Subclasses define ``_n_aux`` (state arrays per parameter) and ``_rule``."""

    _n_aux = 0

    def __init__(self, m: ParameterCollection, learning_rate: float):
        if not isinstance(m, ParameterCollection):
            raise TypeError(f"{type(self).__name__}: needs a ParameterCollection, got {type(m).__name__} [at "
                            f"{user_line()}]")
        self.model = m
        self.learning_rate = _num(type(self).__name__, "learning_rate", learning_rate)
        self.clipping_enabled = True
        self.clip_threshold = 5.0
        self.sparse_updates_enabled = True
        self.updates = 0
        self.clips = 0
        self.updates_since_status = 0
        self.clips_since_status = 0
        self._aux: dict = {}      # Parameter -> list of state arrays shaped like its value

    # --- DyNet API ---------------------------------------------------------------
    def set_clip_threshold(self, thr: float) -> None:
        """Global gradient-norm clipping threshold; thr <= 0 (e.g. -1) switches clipping off."""
        thr = _num("set_clip_threshold", "thr", thr)
        if thr <= 0:
            self.clipping_enabled, self.clip_threshold = False, 0.0
        else:
            self.clipping_enabled, self.clip_threshold = True, thr

    def get_clip_threshold(self) -> float:
        return self.clip_threshold

    def set_sparse_updates(self, su: bool) -> None:
        """True (default): lookup tables update only the rows that got gradient."""
        self.sparse_updates_enabled = bool(su)

    def set_learning_rate(self, value: float) -> None:
        try:
            self.learning_rate = real(value)
        except (TypeError, ValueError):
            raise TypeError(f"{type(self).__name__}.set_learning_rate: a number, got {value!r} "
                            f"[at {user_line()}]") from None

    def whoami(self) -> str:
        return type(self).__name__

    def status(self) -> str:
        """Print (to stderr, as DyNet) and return learning rate, clips and updates since the
        last call; resets those counters."""
        s = f"[lr={self.learning_rate:g} clips={self.clips_since_status} updates={self.updates_since_status}] "
        sys.stderr.write(s)
        self.clips_since_status = self.updates_since_status = 0
        return s

    def update_epoch(self, r: float = 1.0) -> None:
        """Deprecated in DyNet 2 and a no-op there (the learning rate is unchanged):
        decay ``trainer.learning_rate`` yourself."""
        warnings.warn("update_epoch() is deprecated and does nothing (as in DyNet 2); "
                      "change trainer.learning_rate directly", DeprecationWarning, stacklevel=2)

    def restart(self, learning_rate: Optional[float] = None) -> None:
        """Forget optimizer state (momenta, moments); optionally set a new learning rate.
        As DyNet, the update counter (Adam's bias correction) keeps running."""
        self._aux.clear()
        if learning_rate is not None:
            self.learning_rate = _num("restart", "learning_rate", learning_rate)

    def update(self, scale: Optional[float] = None) -> None:
        """Apply the accumulated gradients of every parameter of the model, then zero them.

        scale: DyNet 1's ``update(s)`` (gone in DyNet 2, kept so that older programs run):
        the gradients are multiplied by s before clipping and the rule."""
        self._update(self.model.parameters_list(), self.model.lookup_parameters_list(),
                     scale=1.0 if scale is None else _num("update", "scale", scale))

    def update_subset(self, updated_params, updated_lookups) -> None:
        """As ``update`` for the parameters and lookup parameters at these positions of
        ``parameters_list()`` / ``lookup_parameters_list()`` only (DyNet's last resort;
        prefer ``update=False`` when building). Clipping sees only their gradients, and only
        their gradients are zeroed: the others wait for a later update. (DyNet 2.1's Python
        update_subset does nothing at all; this is what its documentation describes.)"""
        ps, ls = self.model.parameters_list(), self.model.lookup_parameters_list()
        sel = []
        for what, idx, lst in (("parameter", updated_params, ps), ("lookup parameter", updated_lookups, ls)):
            try:
                idx = [int(i) for i in idx]
            except (TypeError, ValueError):
                raise TypeError(f"{type(self).__name__}.update_subset: {what} indices must be a list of ints, "
                                f"got {idx!r} [at {user_line()}]") from None
            bad = [i for i in idx if not 0 <= i < len(lst)]
            if bad:
                raise IndexError(f"{type(self).__name__}.update_subset: {what} index {bad[0]} out of range "
                                 f"(the model has {len(lst)}) [at {user_line()}]")
            sel.append([lst[i] for i in sorted(set(idx))])
        self._update(*sel, clear=sel[0] + sel[1])

    # --- internals -----------------------------------------------------------------
    def _update(self, params, lookups, clear=None, scale: float = 1.0) -> None:
        work = []   # (parameter, rows or None for all, gradient of those rows)
        for p in params:
            if p.updated:
                work.append((p, None, p.grad))
        for p in lookups:
            if not p.updated:
                continue
            rows = p.used_rows() if self.sparse_updates_enabled else None
            if rows is not None and rows.shape[0] == p.data.shape[0]:
                rows = None           # every row got gradient: the dense in-place rule is the same step
            if rows is None:
                work.append((p, None, p.grad))
            elif rows.shape[0] > 0:
                # the rows' gradient, gathered once for the clipping norm and the rule
                work.append((p, rows, p.grad.take(rows, axis=0)))
        gscale = self._clip_scale(work, scale, clear is None)
        for p, rows, g in work:
            self._apply(p, rows, g, gscale)
        # the parameters updated had their gradients zeroed by _apply (which _clear_grad now
        # knows); the others are cleared here, but for frozen ones (set_updated(False)): as
        # DyNet's, their gradients add up until an update after they are unfrozen applies them
        for p in self.model.all_parameters() if clear is None else clear:
            if p.updated:
                p._clear_grad()
            elif p.is_lookup and len(p.rows_used) > 1 and not p.all_updated:
                p.rows_used = [p.used_rows()]       # the record of rows stays one array
        self.model._apply_weight_decay()      # DyNet: after every update, whatever the rule
        self.updates += 1
        self.updates_since_status += 1
        self._after_update()

    def _after_update(self) -> None:
        """Hook run after each update (a learning-rate schedule)."""

    def _clip_scale(self, work, scale: float = 1.0, frozen: bool = True) -> float:
        """DyNet's clipping: scale all gradients (times scale) by thr/‖g‖ when their global
        norm exceeds thr. As DyNet's, the norm counts the gradients frozen parameters
        (set_updated(False)) hold too (where frozen: update() rather than update_subset()).
        The norm is taken with clipping off too: a non-finite gradient (a finite loss can
        have one: the norm of a zero vector) must not reach the parameters."""
        if not work:
            return scale
        if frozen and self.clipping_enabled:
            for p in self.model.all_parameters():
                if not p.updated and p.touched:
                    rows = p.used_rows() if p.is_lookup else None
                    # a frozen table's gradient is zero off the rows that got some: the whole
                    # table's norm is the same, and cheaper than a gather of many rows
                    g = p.grad if rows is None or 4 * rows.shape[0] > p.grad.shape[0] else p.grad.take(rows, axis=0)
                    work = work + [(p, None, g)]
        sums: dict = {}   # one device reduction per backend, one host transfer each
        for p, rows, g in work:
            # a dot product reads g once; (g * g).sum() also writes and rereads a temporary
            s = p.xp.vdot(g, g) if g.flags.c_contiguous else (g * g).sum()
            sums[p.xp] = s if p.xp not in sums else sums[p.xp] + s
        norm = abs(scale) * math.sqrt(sum(float(s) for s in sums.values()))
        if not math.isfinite(norm):
            bad = [p.name() for p, rows, g in work if not bool(p.xp.isfinite(g).all())]
            if not bad and math.isfinite(scale) and not self.clipping_enabled:
                return scale        # finite gradients whose float32 norm overflowed: DyNet updates
            raise NonFiniteError(
                f"{type(self).__name__}.update: gradient norm is {norm}"
                + (f" (non-finite gradient in {', '.join(bad[:5])})" if bad else f" (scale {scale})")
                + "; parameters unchanged and gradients left as they are, for p.grad_as_array(): the next "
                "backward adds to them unless p.zero_grad() clears them (each of pc.parameters_list() + "
                f"pc.lookup_parameters_list()) [at {user_line()}]")
        if self.clipping_enabled and norm > self.clip_threshold:
            self.clips += 1
            self.clips_since_status += 1
            return scale * self.clip_threshold / norm
        return scale

    def _state(self, p: Parameter) -> list:
        aux = self._aux.get(p)
        if aux is None:
            aux = self._aux[p] = [p.xp.zeros_like(p.data) for _ in range(self._n_aux)]
        return aux

    # elements per piece of an in-place update: its ~10 passes over value, gradient, state and
    # one scratch array then run in L2 instead of streaming each whole array from memory
    # (Adam on a 256x512 matrix: 0.36 -> 0.17 ms; on 10000x256: 8.1 -> 6.4 ms)
    INPLACE_PIECE = 32768

    def _apply(self, p: Parameter, rows, g, gscale: float) -> None:
        """Update p (its rows `rows`, whose gradient is g; all rows if rows is None) and zero
        the gradient it used: each piece of it is zeroed right after its last read, while
        it is in cache, which spares the separate pass of clearing it afterwards."""
        aux = self._state(p)
        if rows is None and self._inplace is not None:
            arrays = [p.data, p.grad] + aux
            n = self.INPLACE_PIECE
            # (NumPy only: on a GPU each piece would be one more round of kernel launches)
            if p.data.size <= 2 * n or type(p.data) is not np.ndarray or \
                    not all(a.flags.c_contiguous for a in arrays):
                self._inplace(p.data, p.grad, aux, gscale, p.xp)
                p.grad[...] = 0
            else:
                flat = [a.reshape(-1) for a in arrays]
                for s in range(0, p.data.size, n):
                    x, piece, *st = [a[s:s + n] for a in flat]
                    self._inplace(x, piece, st, gscale, p.xp)
                    piece[...] = 0
            p._grad_zeroed()
        elif rows is None:
            new_x, new_aux = self._rule(p.data, p.grad, aux, gscale, p.xp)
            p.data[...] = new_x
            for a, n in zip(aux, new_aux):
                a[...] = n
        else:
            # (take: a third faster than fancy indexing for rows of a table)
            x, st = p.data.take(rows, axis=0), [a.take(rows, axis=0) for a in aux]
            if self._inplace is not None:
                # the rule in place on the gathered rows: one scratch array, not a dozen
                self._inplace(x, g, st, gscale, p.xp)
            else:
                x, st = self._rule(x, g, st, gscale, p.xp)
            p.data[rows] = x
            for a, n in zip(aux, st):
                a[rows] = n
            p._clear_rows(rows)

    def _rule(self, x, g, aux: list, gscale: float, xp):
        """New value and state arrays from value x, gradient g and state aux (all same shape)."""
        raise NotImplementedError

    # Optional: the same rule updating x and aux in place with one scratch array (dense
    # parameters: a 10 MB softmax matrix costs a dozen temporaries with _rule).
    _inplace = None


class SimpleSGDTrainer(Trainer):
    """x ← x − η·s·g  (s: the clipping scale)."""

    def __init__(self, m: ParameterCollection, learning_rate: float = 0.1):
        super().__init__(m, learning_rate)

    def _rule(self, x, g, aux, gscale, xp):
        return x - (self.learning_rate * gscale) * g, []

    def _inplace(self, x, g, aux, gscale, xp):
        x -= xp.multiply(g, self.learning_rate * gscale)


class CyclicalSGDTrainer(SimpleSGDTrainer):
    """SGD whose rate follows DyNet's triangular cycle (Smith, 2015). Update k (k = 0, 1, ...)
    uses the current rate, then sets the rate for the next one::

        cycle = ⌊1 + k/(2·step_size)⌋;  u = |k/step_size − 2·cycle + 1|
        η ← η_min + (η_max − η_min)·max(0, 1 − u)·γᵏ

    The first update runs at η_min. ``restart()`` keeps the cycle position (as DyNet)."""

    def __init__(self, m: ParameterCollection, learning_rate_min: float = 0.01, learning_rate_max: float = 0.1,
                 step_size: float = 2000, gamma: float = 1.0):
        super().__init__(m, learning_rate_min)
        step_size = _num("CyclicalSGDTrainer", "step_size", step_size)
        if step_size <= 0:
            raise ValueError(f"CyclicalSGDTrainer: step_size must be positive, got {step_size} [at {user_line()}]")
        self.learning_rate_min = _num("CyclicalSGDTrainer", "learning_rate_min", learning_rate_min)
        self.learning_rate_max = _num("CyclicalSGDTrainer", "learning_rate_max", learning_rate_max)
        self.step_size, self.gamma = step_size, _num("CyclicalSGDTrainer", "gamma", gamma)
        self.it = 0

    def _after_update(self) -> None:
        k, s = self.it, self.step_size
        cycle = math.floor(1 + k / (2 * s))
        u = abs(k / s - 2 * cycle + 1)
        up = (self.learning_rate_max - self.learning_rate_min) * (1 - u) * self.gamma ** k if u < 1 else 0.0
        self.learning_rate = self.learning_rate_min + up
        self.it += 1


class MomentumSGDTrainer(Trainer):
    """v ← μ·v − η·s·g;  x ← x + v."""

    _n_aux = 1

    def __init__(self, m: ParameterCollection, learning_rate: float = 0.01, mom: float = 0.9):
        super().__init__(m, learning_rate)
        self.momentum = _num(type(self).__name__, "mom", mom)

    def _rule(self, x, g, aux, gscale, xp):
        v = self.momentum * aux[0] - (self.learning_rate * gscale) * g
        return x + v, [v]


class AdagradTrainer(Trainer):
    """G ← G + (s·g)²;  x ← x − η·s·g / √(G + ε)."""

    _n_aux = 1

    def __init__(self, m: ParameterCollection, learning_rate: float = 0.1, eps: float = 1e-20):
        super().__init__(m, learning_rate)
        self.epsilon = _num(type(self).__name__, "eps", eps)

    def _rule(self, x, g, aux, gscale, xp):
        g = gscale * g
        G = aux[0] + g * g
        return x - self.learning_rate * g / xp.sqrt(G + self.epsilon), [G]


class AdamTrainer(Trainer):
    """DyNet's Adam, t = updates + 1 (counted over update() calls, shared by all rows)::

        m ← β1·m + (1−β1)·s·g;  v ← β2·v + (1−β2)·(s·g)²
        x ← x − α·√(1−β2ᵗ)/(1−β1ᵗ) · m / (√v + ε)

    (ε is added to √v, not to the bias-corrected √v̂ as in the paper: DyNet 2.1's form,
    checked against it; the two differ only when ε is not negligible.)"""

    _n_aux = 2

    def __init__(self, m: ParameterCollection, alpha: float = 0.001, beta_1: float = 0.9,
                 beta_2: float = 0.999, eps: float = 1e-8):
        super().__init__(m, alpha)
        self.beta_1, self.beta_2, self.epsilon = (_num(type(self).__name__, k, v) for k, v in
                                                  (("beta_1", beta_1), ("beta_2", beta_2), ("eps", eps)))

    def _rule(self, x, g, aux, gscale, xp):
        b1, b2 = self.beta_1, self.beta_2
        g = gscale * g
        m = b1 * aux[0] + (1 - b1) * g
        v = b2 * aux[1] + (1 - b2) * (g * g)
        t = self.updates + 1
        c2 = math.sqrt(1 - b2 ** t)
        lr_t = self.learning_rate * c2 / (1 - b1 ** t)
        return x - lr_t * m / (xp.sqrt(v) + self.epsilon), [m, v]

    def _inplace(self, x, g, aux, gscale, xp):
        b1, b2 = self.beta_1, self.beta_2
        m, v = aux
        t = self.updates + 1
        c2 = math.sqrt(1 - b2 ** t)
        lr_t = self.learning_rate * c2 / (1 - b1 ** t)
        tmp = xp.multiply(g, (1 - b1) * gscale)
        m *= b1
        m += tmp
        xp.multiply(g, g, out=tmp)
        tmp *= (1 - b2) * gscale * gscale
        v *= b2
        v += tmp
        xp.sqrt(v, out=tmp)
        tmp += self.epsilon
        xp.divide(m, tmp, out=tmp)
        tmp *= lr_t
        x -= tmp


class AdadeltaTrainer(Trainer):
    """AdaDelta (Zeiler, 2012); no learning rate (``learning_rate`` is 1 and unused, as DyNet)::

        g ← s·g;  G ← ρ·G + (1−ρ)·g²;  d = −g·√(D + ε)/√(G + ε)
        D ← ρ·D + (1−ρ)·d²;  x ← x + d"""

    _n_aux = 2

    def __init__(self, m: ParameterCollection, eps: float = 1e-6, rho: float = 0.95):
        super().__init__(m, 1.0)
        self.epsilon, self.rho = _num(type(self).__name__, "eps", eps), _num(type(self).__name__, "rho", rho)

    def _rule(self, x, g, aux, gscale, xp):
        rho, eps = self.rho, self.epsilon
        g = gscale * g
        G = rho * aux[0] + (1 - rho) * (g * g)
        d = -g * xp.sqrt(aux[1] + eps) / xp.sqrt(G + eps)
        D = rho * aux[1] + (1 - rho) * (d * d)
        return x + d, [G, D]


class RMSPropTrainer(Trainer):
    """RMSProp: a moving average of squared gradients per element::

        g ← s·g;  G ← ρ·G + (1−ρ)·g²;  x ← x − η·g/√(G + ε)"""

    _n_aux = 1

    def __init__(self, m: ParameterCollection, learning_rate: float = 0.001, eps: float = 1e-8, rho: float = 0.9):
        super().__init__(m, learning_rate)
        self.epsilon, self.rho = _num(type(self).__name__, "eps", eps), _num(type(self).__name__, "rho", rho)

    def _rule(self, x, g, aux, gscale, xp):
        g = gscale * g
        G = self.rho * aux[0] + (1 - self.rho) * (g * g)
        return x - self.learning_rate * g / xp.sqrt(G + self.epsilon), [G]


class AmsgradTrainer(AdamTrainer):
    """AMSGrad (Reddi et al., 2018): Adam dividing by the running maximum of v, t = updates + 1::

        m ← β1·m + (1−β1)·s·g;  v ← β2·v + (1−β2)·(s·g)²;  v̂ ← max(v̂, v)
        x ← x − α·√(1−β2ᵗ)/(1−β1ᵗ) · m / (√v̂ + ε)"""

    _n_aux = 3
    _inplace = None

    def _rule(self, x, g, aux, gscale, xp):
        b1, b2 = self.beta_1, self.beta_2
        g = gscale * g
        m = b1 * aux[0] + (1 - b1) * g
        v = b2 * aux[1] + (1 - b2) * (g * g)
        vhat = xp.maximum(aux[2], v)
        t = self.updates + 1
        lr_t = self.learning_rate * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        return x - lr_t * m / (xp.sqrt(vhat) + self.epsilon), [m, v, vhat]
