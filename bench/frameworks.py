"""Loading the frameworks a model can run on, behind one small interface.

A DyNet-API framework is `autobatch` (strategy chosen per graph via renew_cg) or real `dynet`
(strategy fixed per PROCESS by dynet_config before `import dynet`, hence one subprocess per
measurement). Strategies are dispatched through the tables below, so adding one (e.g. "vertex")
is one line.
"""
import importlib.util
import os
import sys

# strategy name -> renew_cg(autobatching=...) argument for autobatch
AUTOBATCH_STRATEGIES = {"none": "none", "depth": "depth", "agenda": "agenda",
                        "dynet-agenda": "dynet-agenda",   # DyNet's average-depth rule, our engine
                        "vertex": "agenda"}  # vertex: bench/vertex_tasks.py; the lazy rest runs agenda
# strategy name -> dynet_config autobatch flag (0 off, 1 agenda, 2 depth-based)
DYNET_MODES = {"none": 0, "depth": 2, "agenda": 1}
BACKENDS = ("numpy", "cupy")

INSTALL_HINT = {"dynet": "pip install dynet38", "torch": "pip install torch==2.13.0",
                "cupy": "pip install cupy-cuda12x", "autobatch": "pip install -e . (from the repo root)"}


def available(name):
    """Importable without importing it (importing DyNet would fix its autobatch mode)."""
    mod = {"dynet": "dynet", "torch": "torch", "autobatch": "autobatch", "cupy": "cupy"}[name]
    try:
        return importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        return False


class DyFramework:
    """`dy` plus what the runner needs around it: a per-minibatch renew and optional stats."""

    def __init__(self, kind, strategy="agenda", backend="numpy", seed=0, mem=2048):
        self.kind, self.strategy, self.backend = kind, strategy, backend
        if kind == "autobatch":
            if strategy not in AUTOBATCH_STRATEGIES:
                raise ValueError("unknown autobatch strategy %r" % strategy)
            import autobatch as dy
            if hasattr(dy, "set_backend"):
                dy.set_backend(backend)
            elif backend != "numpy":
                raise RuntimeError("autobatch has no set_backend(); cannot select backend %r" % backend)
            dy.reset_random_seed(seed + 1)
            self._renew_kw = {"autobatching": AUTOBATCH_STRATEGIES[strategy]}
        elif kind == "dynet":
            if "dynet" in sys.modules:
                raise RuntimeError("dynet already imported in this process: its autobatch mode is fixed")
            if backend != "numpy":
                raise RuntimeError("the DyNet peer runs on CPU only here")
            import dynet_config
            dynet_config.set(autobatch=DYNET_MODES[strategy], mem=mem, random_seed=seed + 1)
            with _quiet_stderr():  # DyNet prints "[dynet] random seed ..." banners at import
                import dynet as dy
            self._renew_kw = {}
        else:
            raise ValueError("unknown DyNet-API framework %r" % kind)
        self.dy = dy

    @property
    def label(self):
        return "%s/%s" % (self.kind, self.strategy)

    def renew(self):
        self.dy.renew_cg(**self._renew_kw)

    def stats(self):
        return self.dy.stats() if self.kind == "autobatch" else None

    def trainer(self, pc, name="adam"):
        return self.dy.AdamTrainer(pc) if name == "adam" else self.dy.SimpleSGDTrainer(pc)


class _quiet_stderr:
    """Silence fd 2 (C++ writes bypass sys.stderr) for the duration of a block."""

    def __enter__(self):
        sys.stderr.flush()
        self._saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        os.close(self._saved)
