"""autobatch: write the network for one instance; run it batched.

``import autobatch as dy`` runs typical DyNet programs: build a lazy graph per
instance with DyNet's functions, and forward/backward group equal-signature nodes
of all instances into batched NumPy (or CuPy) kernels."""
from __future__ import annotations

from . import runtime
from .api import (abs, affine_transform, average, binary_log_loss, bmax, cdiv, cmult,  # noqa: F401
                  concatenate, concatenate_cols, const_lookup, const_parameter, constant, constrained_softmax,
                  dot_product, dropout, elu, emax, esum, exp, hinge, inputMatrix, inputTensor,
                  inputVector, l2_norm, log, log_softmax, logistic, lookup, lstm_cell, max_dim, mean_elems,
                  noise, ones, parameter, pick, pickneglogsoftmax, pickrange, rectify, reshape,
                  scalarInput, select_rows, softmax, sqrt, square, squared_distance, squared_norm,
                  sum_elems, tanh, transpose, vecInput, zeros)
from .api_graph import *  # noqa: F401,F403  (each lists its names in __all__)
from .api_lstm import *  # noqa: F401,F403
from .api_math import *  # noqa: F401,F403
from .api_random import *  # noqa: F401,F403
from .api_reduce import *  # noqa: F401,F403
from .api_shape import *  # noqa: F401,F403
from .builders import GRUBuilder, LSTMBuilder, RNNState, SimpleRNNBuilder, VanillaLSTMBuilder  # noqa: F401
from .builders_more import (BiRNNBuilder, ClassFactoredSoftmaxBuilder, CompactVanillaLSTMBuilder,  # noqa: F401
                            CoupledLSTMBuilder, FastLSTMBuilder, SoftmaxBuilder, SparseLSTMBuilder,
                            StackedRNNState, StandardSoftmaxBuilder)
from .coop import InstanceCancelled, batched_map  # noqa: F401
from .denormals import flush_denormal, set_flush_denormal  # noqa: F401
from .errors import AutobatchError, GradientError, GraphError, GraphIndexError, NonFiniteError, StaleExpressionError
from .graph import ComputationGraph, Expression, cg, renew_cg
from .dynet_params import DynetParams, init, init_from_params  # noqa: F401
from .params import (ConstInitializer, FromFileInitializer, GlorotInitializer, IdentityInitializer,  # noqa: F401
                     LookupParameter, Model, NormalInitializer, NumpyInitializer, Parameter,
                     ParameterCollection, PyInitializer, SaxeInitializer, UniformInitializer)
from .saving import load, load_generator, save  # noqa: F401
from .runtime import (Strategy, default_strategy, reset_random_seed, set_backend, set_debug,
                      set_default_strategy, set_dropout, set_dtype, set_fusion)
from .stats import summary as stats_summary
from .vertex import InputGraph, UnreadInputWarning, vertex_function  # noqa: F401
from .trainers import (AdadeltaTrainer, AdagradTrainer, AdamTrainer, AmsgradTrainer,  # noqa: F401
                       CyclicalSGDTrainer, MomentumSGDTrainer, RMSPropTrainer, SimpleSGDTrainer, Trainer)

from .minibatch import BatchedExpression  # noqa: F401
from . import api as _api, api_graph as _api_graph, api_lstm as _api_lstm, api_math as _api_math  # noqa: E402
from . import api_random as _api_random, api_reduce as _api_reduce, api_shape as _api_shape  # noqa: E402
from . import minibatch as _minibatch  # noqa: E402

# DyNet's minibatch dimension (minibatch.py): every op runs per element on a batched operand
_minibatch.install(
    [_api, _api_lstm, _api_math, _api_random, _api_reduce, _api_shape],
    skip={"inputTensor", "inputVector", "inputMatrix", "vecInput", "scalarInput", "zeros", "ones", "constant",
          "parameter", "const_parameter", "const_lookup", "lookup", "reshape", "zeroes", "matInput",
          "random_normal", "random_uniform", "random_bernoulli", "random_gumbel", "Parameters",
          "LookupParameters", *_minibatch.BATCH_FUNCTIONS},
    classes=[Expression, Parameter, LookupParameter])

__version__ = "0.1.0"

# DyNet flushes denormal floats to zero at import, and a training loop slows down many times
# where they appear (denormals.py); AUTOBATCH_FLUSH_DENORMAL=0 keeps them
if runtime.state().flush_denormal:
    set_flush_denormal(True)


def stats() -> dict:
    """What the current graph's forward/backward did: nodes, batches, copies, seconds,
    and batch sizes per signature."""
    g = runtime.state().graph
    if g is None:
        raise RuntimeError("stats(): no computation graph yet")
    return g.stats.as_dict(g)

