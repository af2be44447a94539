"""DyNet's global configuration in code: ``DynetParams``, ``init``, ``init_from_params``.

DyNet programs set memory, seed, autobatching and weight decay either with command-line
flags (``--dynet-seed 1``) or in code::

    dyparams = dy.DynetParams()
    dyparams.from_args()            # optional: read DyNet's flags from sys.argv
    dyparams.set_autobatch(True)
    dyparams.set_random_seed(1)
    dyparams.init()                 # or dy.init_from_params(dyparams); dy.init() reads flags only

Here the settings that mean something to autobatch take effect at ``init()``: autobatch
(the default strategy of graphs made by ``renew_cg()``), random_seed (``reset_random_seed``)
and weight_decay (the lambda of ParameterCollections created afterwards). Memory, GPU,
profiling and shared-parameter settings are accepted and ignored: autobatch allocates as
it goes, and picks its device with ``set_backend("cupy")`` / ``AUTOBATCH_BACKEND``.

Differences from DyNet: DyNet initializes only once (``import dynet`` already does, so
there a later ``init()`` only prints a warning and changes nothing); here every ``init()``
applies its settings. A setting never set (autobatch, seed) leaves the current one as it
is, where DyNet would switch autobatching off and draw a random seed."""
from __future__ import annotations

import sys
from typing import Optional

from . import params, runtime
from .errors import user_line

__all__ = ["DynetParams", "init", "init_from_params"]

# DyNet's flags that take a value ("--dynet_mem" spellings too); --dynet-gpu takes none
_VALUE_FLAGS = ("mem", "weight-decay", "seed", "autobatch", "profiling", "gpus", "devices")


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value).strip())
        except ValueError:
            raise ValueError(f"DynetParams: {what} must be an integer, got {value!r} [at {user_line()}]") from None
    return value


class DynetParams:
    """DyNet's global parameters; set them, then ``init()``.

    Attributes (None: not set, ``init()`` leaves that setting alone): autobatch (DyNet's
    0 off, 1 agenda, 2 depth, or a strategy name), random_seed (0: DyNet's "random"),
    weight_decay, and the ignored mem, profiling, shared_parameters, requested_gpus, gpu_mask."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        self.mem = "512"
        self.random_seed = 0
        self.autobatch = None
        self.weight_decay = 0.0
        self.profiling = 0
        self.shared_parameters = False
        self.requested_gpus = None
        self.gpu_mask = None

    def __repr__(self):
        return (f"DynetParams(autobatch={self.autobatch!r}, random_seed={self.random_seed}, "
                f"weight_decay={self.weight_decay}, mem={self.mem!r})")

    # --- setters (DyNet's names) ------------------------------------------------------
    def set_mem(self, mem) -> None:
        """Accepted and ignored (DyNet's memory pool size in MB)."""
        self.mem = str(mem)

    def set_random_seed(self, random_seed: int) -> None:
        """Seed of parameter initialization, dropout and noise; 0 keeps the current
        generator (DyNet: a random seed)."""
        seed = _int(random_seed, "random_seed")
        if seed < 0:
            raise ValueError(f"DynetParams: random_seed must be >= 0, got {seed} [at {user_line()}]")
        self.random_seed = seed

    def set_autobatch(self, autobatch) -> None:
        """True/False, DyNet's 0 (off, strategy "none"), 1 ("agenda"), 2 ("depth"), or a
        strategy name. (DyNet's Python binding takes a bool here, so its set_autobatch(2)
        is agenda; its --dynet-autobatch flag takes the number.)"""
        runtime.parse_strategy(autobatch)     # fail here, not at init()
        self.autobatch = autobatch

    def set_weight_decay(self, weight_decay: float) -> None:
        """L2 weight decay lambda, in [0, 1), of ParameterCollections created after init()
        (see ``ParameterCollection.set_weight_decay``)."""
        self.weight_decay = params._check_weight_decay(weight_decay, "DynetParams.set_weight_decay")

    def set_profiling(self, profiling: int) -> None:
        """Accepted and ignored (see ``dy.stats()`` for what a graph did)."""
        self.profiling = _int(profiling, "profiling")

    def set_shared_parameters(self, shared_parameters: bool) -> None:
        """Accepted and ignored (DyNet's parameters in shared memory for multiprocessing)."""
        self.shared_parameters = bool(shared_parameters)

    def set_requested_gpus(self, requested_gpus: int) -> None:
        """Accepted and ignored: use ``dy.set_backend("cupy")`` for a GPU."""
        self.requested_gpus = _int(requested_gpus, "requested_gpus")

    def set_gpu_mask(self, gpu_mask: list) -> None:
        """Accepted and ignored (entries must be 0 or 1, as DyNet checks)."""
        if any(i not in (0, 1) for i in gpu_mask):
            raise ValueError(f"gpu_mask should only contain 0 and 1s [at {user_line()}]")
        self.gpu_mask = list(gpu_mask)

    def set_cpu_mode(self) -> None:
        """Accepted and ignored."""
        self.requested_gpus = 0

    # --- sources ----------------------------------------------------------------------
    def from_args(self, shared_parameters=None) -> None:
        """Read DyNet's flags from sys.argv: --dynet-mem, --dynet-seed, --dynet-autobatch,
        --dynet-weight-decay, --dynet-profiling, --dynet-gpus, --dynet-devices (each
        followed by its value; also spelt with "_", or as --dynet-seed=1) and --dynet-gpu.
        As DyNet, settings made before are first reset to the defaults. Other arguments
        are left alone, and sys.argv is not changed: DyNet's Python from_args removes
        nothing either (its C++ initialize(argc, argv) does)."""
        self._reset()     # as DyNet: settings made before from_args are replaced
        if shared_parameters is not None:
            self.shared_parameters = bool(shared_parameters)
        argv = sys.argv[1:]
        k = 0
        while k < len(argv):
            arg = argv[k]
            k += 1
            if not arg.startswith(("--dynet-", "--dynet_")):
                continue
            name, eq, value = arg[len("--dynet-"):].partition("=")
            name = name.replace("_", "-")
            if name == "gpu" and not eq:
                self.requested_gpus = max(self.requested_gpus or 0, 1)
                continue
            if name not in _VALUE_FLAGS:
                continue
            if not eq:
                if k >= len(argv):
                    raise ValueError(f"--dynet-{name} expects an argument [at {user_line()}]")
                value = argv[k]
                k += 1
            self._from_flag(name, value)

    def _from_flag(self, name: str, value: str) -> None:
        where = f"--dynet-{name} {value}"
        try:
            if name == "mem":
                self.set_mem(value)
            elif name == "seed":
                self.set_random_seed(value)
            elif name == "autobatch":
                self.set_autobatch(value)
            elif name == "weight-decay":
                self.set_weight_decay(float(value))
            elif name == "profiling":
                self.set_profiling(value)
            elif name == "gpus":
                self.set_requested_gpus(value)
            # --dynet-devices: a device list; ignored like the GPU settings
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {e} [at {user_line()}]") from None

    def from_config(self, conf: dict) -> None:
        """Set from a dict as ``dynet_config.get()`` returns: keys mem, seed, autobatch,
        profiling, weight_decay, shared_params, requested_gpus, gpu_mask."""
        self.set_mem(conf["mem"])
        self.set_random_seed(conf["seed"])
        self.set_autobatch(conf["autobatch"])
        self.set_profiling(conf["profiling"])
        self.set_weight_decay(conf["weight_decay"])
        self.set_shared_parameters(conf["shared_params"])
        self.set_requested_gpus(conf["requested_gpus"])
        if conf.get("gpu_mask"):
            self.set_gpu_mask(conf["gpu_mask"])

    # --- apply ------------------------------------------------------------------------
    def init(self) -> None:
        """Apply the settings: the default autobatching strategy, the random seed, and the
        weight decay of collections created from now on."""
        strategy = None if self.autobatch is None else runtime.parse_strategy(self.autobatch)
        wd = params._check_weight_decay(self.weight_decay, "DynetParams.init")
        if strategy is not None:
            runtime.set_default_strategy(strategy)
        if self.random_seed:
            runtime.reset_random_seed(self.random_seed)
        params.set_default_weight_decay(wd)


def init(shared_parameters: Optional[bool] = None) -> None:
    """DyNet's ``init()``: settings from DyNet's command-line flags in sys.argv, applied
    (``DynetParams().from_args(); .init()``)."""
    p = DynetParams()
    p.from_args(shared_parameters)
    p.init()


def init_from_params(params: DynetParams) -> None:
    """``params.init()``."""
    if not isinstance(params, DynetParams):
        raise TypeError(f"init_from_params: needs a DynetParams, got {type(params).__name__} [at {user_line()}]")
    params.init()
