"""Process-wide settings: backend, dtype, default strategy, random seed, and the
current computation graph. Read once from the environment and DyNet's flags."""
from __future__ import annotations

import enum
import os
import sys

import numpy as np

from .errors import user_line


class Strategy(enum.Enum):
    """How forward groups nodes into batches."""
    NONE = "none"      # node by node, in creation order
    DEPTH = "depth"    # TensorFlow Fold: equal depth and signature
    AGENDA = "agenda"  # ready nodes, lowest level first, or DyNet's rule / depth order where it learns that batches better or as well for less (scheduler._adaptive)
    DYNET_AGENDA = "dynet-agenda"  # DyNet's rule: lowest average depth per signature first


_DYNET_CODES = {0: Strategy.NONE, 1: Strategy.AGENDA, 2: Strategy.DEPTH}


def parse_strategy(s) -> Strategy:
    """Accept a Strategy, its name, DyNet's integer (0 off, 1 agenda, 2 depth; 3 and 100+
    also agenda) or a bool."""
    if isinstance(s, Strategy):
        return s
    if isinstance(s, bool):
        return Strategy.AGENDA if s else Strategy.NONE
    if isinstance(s, (int, np.integer)):
        if int(s) in _DYNET_CODES:
            return _DYNET_CODES[int(s)]
        if int(s) == 3 or int(s) >= 100:
            # DyNet's 3 is an agenda variant, and 100+ times strategies 1-3 to keep the
            # fastest: agenda is ours that wins or ties on every benchmark task
            return Strategy.AGENDA
    elif isinstance(s, str):
        t = s.strip().lower()
        if t.lstrip("-").isdigit():
            return parse_strategy(int(t))
        for m in Strategy:
            if t == m.value:
                return m
    raise ValueError(f"unknown autobatching strategy {s!r}: use 'none', 'depth', 'agenda', "
                     f"a Strategy, DyNet's 0/1/2/3/100+ or a bool [at {user_line()}]")


def _on(var: str) -> bool:
    """A switch that is on unless the environment variable says 0, false or no."""
    return os.environ.get(var, "1").strip().lower() not in ("0", "false", "no")


def _argv_flag(name):
    argv = sys.argv
    for k, a in enumerate(argv):
        if a == name and k + 1 < len(argv):
            return argv[k + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _no_hook(g):
    pass


_graph_hook = _no_hook


def on_graph(f) -> None:
    """f(graph) runs whenever the current graph changes (fastpath.bind)."""
    global _graph_hook
    _graph_hook = f


def graph_changed(g) -> None:
    """The current graph g replaced its columns or caches."""
    _graph_hook(g)


class _State:
    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        if name == "graph":
            _graph_hook(value)

    def __init__(self):
        self.strategy = Strategy.AGENDA
        env = os.environ.get("AUTOBATCH_STRATEGY")
        flag = _argv_flag("--dynet-autobatch")
        # name the source in the error: a bad value here fails at import time
        try:
            if flag is not None:
                self.strategy = parse_strategy(flag)
            elif env:
                self.strategy = parse_strategy(env)
        except ValueError as e:
            src = f"--dynet-autobatch {flag}" if flag is not None else f"AUTOBATCH_STRATEGY={env}"
            raise ValueError(f"{src}: {e} [at {user_line()}]") from None
        seed = _argv_flag("--dynet-seed") or os.environ.get("AUTOBATCH_SEED")
        self.seed = int(seed) if seed else 0
        self.rng = np.random.default_rng(self.seed or None)
        self.graph_seed = 0
        self.dtype = np.dtype(os.environ.get("AUTOBATCH_DTYPE", "float32"))
        self.dropout = True
        # record each node's creation line (for error messages); off by default: it
        # costs ~0.2-0.4 us per node, more than building the node itself
        self.debug = os.environ.get("AUTOBATCH_DEBUG", "").strip().lower() not in ("", "0", "false", "no")
        self.fuse = _on("AUTOBATCH_FUSE")
        self.flush_denormal = _on("AUTOBATCH_FLUSH_DENORMAL")     # taken at import (denormals.py)
        self.graph = None
        self._backend = None
        self.backend_name = os.environ.get("AUTOBATCH_BACKEND", "numpy")

    @property
    def backend(self):
        if self._backend is None:
            from . import backends
            self._backend = backends.get(self.backend_name)
        return self._backend


_STATE = _State()


def state() -> _State:
    return _STATE


def set_default_strategy(s) -> None:
    """Strategy for graphs created by ``renew_cg()`` without an explicit one."""
    _STATE.strategy = parse_strategy(s)


def default_strategy() -> Strategy:
    return _STATE.strategy


def set_backend(name: str) -> None:
    """Select "numpy" or "cupy" for parameters created and graphs renewed from now on."""
    from . import backends
    _STATE._backend = backends.get(name)
    _STATE.backend_name = name


def set_dtype(dtype) -> None:
    """float32 (default) or float64 for parameters and graphs created from now on."""
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dt} [at {user_line()}]")
    _STATE.dtype = dt


def reset_random_seed(seed: int) -> None:
    """Reseed parameter initialisation and dropout/noise."""
    _STATE.seed = int(seed)
    _STATE.rng = np.random.default_rng(int(seed))
    _STATE.graph_seed = 0


def set_debug(enabled: bool) -> None:
    """Record the user's source line of every node of graphs created from now on, so
    that errors found later (a non-finite loss, a failing kernel) name where the
    culprit was built. Also AUTOBATCH_DEBUG=1. Off by default (it slows building)."""
    _STATE.debug = bool(enabled)


def set_fusion(enabled: bool) -> None:
    """Fuse an activation into the product that feeds it (``logistic(affine_transform(..))``
    becomes one node; ops/fused.py) in graphs created and vertex functions traced from now on.
    On by default; also AUTOBATCH_FUSE=0. Values and gradients are the same either way (to
    rounding)."""
    _STATE.fuse = bool(enabled)


def set_dropout(enabled: bool) -> None:
    """Globally switch dropout on (training) or off (dropout becomes the identity)."""
    _STATE.dropout = bool(enabled)
