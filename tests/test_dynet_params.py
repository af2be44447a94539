"""DynetParams / init / init_from_params (settings take effect; DyNet's flags parsed from
sys.argv, which stays as it is) and ParameterCollection's L2 weight decay. Expected decay
values are those real DyNet 2.1 gave for the same program (DYNET_DECAY)."""
import sys

import numpy as np
import pytest

import autobatch as dy
from autobatch import params, runtime
from autobatch.dynet_params import DynetParams, init, init_from_params
from autobatch.runtime import Strategy


@pytest.fixture(autouse=True)
def _restore_weight_decay():
    saved = params.default_weight_decay()
    yield
    params.set_default_weight_decay(saved)


def strategy_of_new_graph():
    return dy.renew_cg().strategy


# --- autobatch ----------------------------------------------------------------------------
@pytest.mark.parametrize("value,expected", [
    (0, Strategy.NONE), (1, Strategy.AGENDA), (2, Strategy.DEPTH),       # DyNet's numbering
    (False, Strategy.NONE), (True, Strategy.AGENDA), ("depth", Strategy.DEPTH),
])
def test_set_autobatch_reaches_new_graphs(value, expected):
    dy.set_default_strategy("none" if expected != Strategy.NONE else "agenda")
    p = DynetParams()
    p.set_autobatch(value)
    assert strategy_of_new_graph() != expected      # nothing happens before init()
    p.init()
    assert runtime.default_strategy() == expected
    assert strategy_of_new_graph() == expected


def test_autobatch_never_set_leaves_the_strategy():
    dy.set_default_strategy("depth")
    DynetParams().init()
    assert strategy_of_new_graph() == Strategy.DEPTH


@pytest.mark.parametrize("bad", [5, -1, "fast"])
def test_bad_autobatch_rejected_when_set(bad):
    p = DynetParams()
    with pytest.raises(ValueError, match="strategy"):
        p.set_autobatch(bad)
    assert p.autobatch is None


def test_strategy_changes_batching_not_results():
    m = dy.ParameterCollection()
    W = m.add_parameters((3, 2))

    def run(code):
        p = DynetParams()
        p.set_autobatch(code)
        p.init()
        dy.renew_cg()
        xs = [dy.inputVector([float(i), 1.0]) for i in range(4)]
        loss = dy.esum([dy.sum_elems(dy.tanh(W * x)) for x in xs])
        return loss.value(), dy.stats()
    v0, s0 = run(0)
    v1, s1 = run(1)
    assert v0 == pytest.approx(v1, rel=1e-6)
    assert s0 != s1


# --- random seed ---------------------------------------------------------------------------
def draw():
    m = dy.ParameterCollection()
    return m.add_parameters((3, 4)).as_array(), m.add_lookup_parameters((5, 2)).as_array()


def test_seed_makes_initialization_reproducible():
    p = DynetParams()
    p.set_random_seed(7)
    p.init()
    a = draw()
    init_from_params(p)
    b = draw()
    p.set_random_seed(8)
    p.init()
    c = draw()
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(x, y)
        assert not np.allclose(x, z)


def test_seed_0_leaves_the_generator_alone():
    dy.reset_random_seed(5)
    a = draw()
    dy.reset_random_seed(5)
    DynetParams().init()            # DyNet's 0: "random"; here: whatever it was
    for x, y in zip(a, draw()):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("bad", [-1, "x", 1.5])
def test_bad_seed(bad):
    with pytest.raises(ValueError, match="random_seed"):
        DynetParams().set_random_seed(bad)


# --- accepted and ignored -------------------------------------------------------------------------
def test_ignored_settings_are_accepted():
    p = DynetParams()
    p.set_mem(2048)
    p.set_profiling(1)
    p.set_shared_parameters(True)
    p.set_requested_gpus(1)
    p.set_gpu_mask([0, 1])
    p.set_cpu_mode()
    before = (runtime.default_strategy(), runtime.state().backend_name, runtime.state().dtype)
    p.init()
    assert (runtime.default_strategy(), runtime.state().backend_name, runtime.state().dtype) == before
    with pytest.raises(ValueError, match="0 and 1"):
        p.set_gpu_mask([0, 2])


# --- from_args / init() ----------------------------------------------------------------------------
def test_from_args_reads_flags_and_leaves_argv(monkeypatch):
    argv = ["prog.py", "a", "--dynet-seed", "3", "b", "--dynet-autobatch", "2", "--dynet-mem", "100",
            "--dynet-weight-decay", "0.01", "--dynet-foo", "2", "c", "--dynet_profiling", "1",
            "--dynet-gpu", "--dynet-gpus", "1", "--dynet-devices", "GPU:0", "--other", "x"]
    monkeypatch.setattr(sys, "argv", list(argv))
    p = DynetParams()
    p.from_args()
    assert sys.argv == argv                   # DyNet's Python from_args removes nothing
    assert (p.random_seed, p.autobatch, p.mem, p.weight_decay, p.profiling) == (3, "2", "100", 0.01, 1)
    assert p.requested_gpus == 1
    p.init()
    assert strategy_of_new_graph() == Strategy.DEPTH
    assert dy.ParameterCollection().get_weight_decay() == 0.01


def test_from_args_equals_form_and_underscores(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["p", "--dynet-seed=12", "--dynet_autobatch", "0",
                                      "--dynet_weight_decay=0.5"])
    p = DynetParams()
    p.from_args()
    assert (p.random_seed, p.autobatch, p.weight_decay) == (12, "0", 0.5)


def test_from_args_resets_earlier_settings(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["p", "--dynet-seed", "4"])
    p = DynetParams()
    p.set_autobatch(2)
    p.set_weight_decay(0.2)
    p.from_args()                             # as DyNet: a fresh set from the flags
    assert (p.random_seed, p.autobatch, p.weight_decay) == (4, None, 0.0)


@pytest.mark.parametrize("args,match", [
    (["--dynet-seed"], "--dynet-seed expects an argument"),
    (["--dynet-seed", "x"], "--dynet-seed x"),
    (["--dynet-autobatch", "9"], "--dynet-autobatch 9"),
    (["--dynet-weight-decay", "1.5"], r"--dynet-weight-decay 1.5.*\[0, 1\)"),
    (["--dynet-weight-decay", "abc"], "--dynet-weight-decay abc"),
])
def test_from_args_bad_values(monkeypatch, args, match):
    monkeypatch.setattr(sys, "argv", ["p"] + args)
    with pytest.raises(ValueError, match=match):
        DynetParams().from_args()


def test_module_init_reads_argv(monkeypatch):
    dy.set_default_strategy("agenda")
    monkeypatch.setattr(sys, "argv", ["p", "--dynet-autobatch", "0", "--dynet-seed", "9", "file.txt"])
    init()
    assert strategy_of_new_graph() == Strategy.NONE
    a = draw()
    dy.reset_random_seed(9)
    np.testing.assert_array_equal(a[0], draw()[0])
    assert sys.argv[-1] == "file.txt" and len(sys.argv) == 6


def test_init_without_flags_changes_nothing(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["p", "x"])
    dy.set_default_strategy("depth")
    params.set_default_weight_decay(0.0)
    init()
    assert strategy_of_new_graph() == Strategy.DEPTH


def test_from_config():
    p = DynetParams()
    p.from_config({"mem": 4, "seed": 9, "autobatch": 2, "profiling": 0, "weight_decay": 0.1,
                   "shared_params": 0, "requested_gpus": 0, "gpu_mask": []})
    assert (p.random_seed, p.autobatch, p.weight_decay, p.mem) == (9, 2, 0.1, "4")


def test_init_from_params_needs_dynetparams():
    with pytest.raises(TypeError, match="DynetParams"):
        init_from_params({"seed": 1})


# --- weight decay on the collection -------------------------------------------------------------------
def test_weight_decay_set_get_and_inheritance():
    m = dy.ParameterCollection()
    assert m.get_weight_decay() == 0.0
    early = m.add_subcollection("early")
    m.set_weight_decay(0.1)
    late = m.add_subcollection("late")
    # as DyNet: a sub-collection takes its parent's lambda when created
    assert (m.get_weight_decay(), early.get_weight_decay(), late.get_weight_decay()) == (0.1, 0.0, 0.1)
    late.set_weight_decay_lambda(0.3)
    assert late.get_weight_decay() == 0.3 and m.get_weight_decay() == 0.1


@pytest.mark.parametrize("bad,exc", [(-0.1, ValueError), (1.0, ValueError), ("0.1", TypeError), (None, TypeError)])
def test_weight_decay_bad_values(bad, exc):
    m = dy.ParameterCollection()
    with pytest.raises(exc, match="weight decay"):
        m.set_weight_decay(bad)
    assert m.get_weight_decay() == 0.0


def test_dynetparams_weight_decay_is_the_default_of_new_collections():
    old = dy.ParameterCollection()
    p = DynetParams()
    p.set_weight_decay(0.25)
    p.init()
    assert dy.ParameterCollection().get_weight_decay() == 0.25
    assert old.get_weight_decay() == 0.0
    with pytest.raises(ValueError):
        p.set_weight_decay(-1)


def test_apply_weight_decay(backend):
    m = dy.ParameterCollection()
    W = m.add_parameters((2, 2), init=np.array([[1.0, 2.0], [3.0, 4.0]]))
    sub = m.add_subcollection()
    V = sub.add_parameters(2, init=1.0)
    E = m.add_lookup_parameters((3, 2), init=2.0)
    F = m.add_parameters(2, init=1.0)
    F.set_updated(False)
    m._apply_weight_decay()                        # lambda 0: nothing
    np.testing.assert_array_equal(W.as_array(), [[1, 2], [3, 4]])
    m.set_weight_decay(0.1)
    sub.set_weight_decay(0.5)                      # the trainer's collection counts
    m._apply_weight_decay()
    np.testing.assert_allclose(W.as_array(), 0.9 * np.array([[1, 2], [3, 4]]), rtol=1e-6)
    np.testing.assert_allclose(V.as_array(), [0.9, 0.9], rtol=1e-6)
    np.testing.assert_allclose(E.as_array(), np.full((3, 2), 1.8), rtol=1e-6)   # every row
    # frozen too: DyNet's decay is one scale of the whole collection, which its graph reads
    # (DyNet's as_array() does not show that scale, its expressions do)
    np.testing.assert_allclose(F.as_array(), [0.9, 0.9], rtol=1e-6)
    assert W.data.dtype == np.float32


# DyNet 2.1's values (expressions of W and E's rows) after each update, for the program
# of the test below; with lambda 0.5 DyNet folds its pending scale into the values after
# the second update ("RESCALE WEIGHT DECAY FROM 0.125 to 1.0"), which must not show
DYNET_DECAY = {
    0.1: ([[[0.45, 0.9], [2.25, 2.7]], [[-0.045, -0.09], [1.575, 1.53]], [[-0.4905, -0.981], [0.9675, 0.477]]],
          [[[-0.45, 0.45], [1.8, 2.7], [3.6, 4.5]], [[-0.855, -0.045], [1.62, 2.43], [3.24, 4.05]],
           [[-1.2195, -0.4905], [1.458, 2.187], [2.916, 3.645]]]),
    0.5: ([[[0.25, 0.5], [1.25, 1.5]], [[-0.125, -0.25], [0.375, 0.25]], [[-0.3125, -0.625], [-0.0625, -0.375]],
           [[-0.40625, -0.8125], [-0.28125, -0.6875]]],
          [[[-0.25, 0.25], [1.0, 1.5], [2.0, 2.5]], [[-0.375, -0.125], [0.5, 0.75], [1.0, 1.25]],
           [[-0.4375, -0.3125], [0.25, 0.375], [0.5, 0.625]], [[-0.46875, -0.40625], [0.125, 0.1875], [0.25, 0.3125]]]),
}


@pytest.mark.parametrize("lam", sorted(DYNET_DECAY))
def test_weight_decay_sgd_matches_dynet(lam):
    """SimpleSGD lr 0.5, loss = sum(W x) + sum(E[0]) with x = (1, 2); untouched rows of E
    decay too."""
    m = dy.ParameterCollection()
    m.set_weight_decay(lam)
    W = m.add_parameters((2, 2), init=np.array([[1.0, 2.0], [3.0, 4.0]]))
    E = m.lookup_parameters_from_numpy(np.arange(6.0).reshape(3, 2))
    tr = dy.SimpleSGDTrainer(m, 0.5)
    dynet_W, dynet_E = DYNET_DECAY[lam]
    for step in range(len(dynet_W)):
        dy.renew_cg()
        x = dy.inputVector([1.0, 2.0])
        (dy.sum_elems(W * x) + dy.sum_elems(E[0])).backward()
        tr.update()
        np.testing.assert_allclose(W.as_array(), dynet_W[step], atol=2e-6)
        np.testing.assert_allclose(E.as_array(), dynet_E[step], atol=2e-6)


@pytest.mark.parametrize("make", [lambda m: dy.AdamTrainer(m, 0.1), lambda m: dy.MomentumSGDTrainer(m, 0.1),
                                  lambda m: dy.AdagradTrainer(m, 0.1), lambda m: dy.SimpleSGDTrainer(m, 0.1)])
def test_weight_decay_is_the_rule_then_a_shrink(make):
    """DyNet divides each step by its pending scale, then shrinks the scale: in values,
    every rule's update followed by w *= (1 - lambda), the next gradient seeing the shrunk w."""
    def run(lam, by_hand):
        m = dy.ParameterCollection()
        m.set_weight_decay(lam)
        W = m.add_parameters(3, init=np.array([0.5, -1.0, 2.0]))
        tr = make(m)
        out = []
        for _ in range(4):
            dy.renew_cg()
            dy.sum_elems(dy.cmult(W.expr(True), W.expr(True))).backward()
            tr.update()
            if by_hand:
                W.scale(1 - by_hand)
            out.append(W.as_array())
        return np.array(out)
    decayed, by_hand, plain = run(0.2, 0), run(0.0, 0.2), run(0.0, 0)
    np.testing.assert_allclose(decayed, by_hand, rtol=1e-5)
    assert not np.allclose(decayed, plain, rtol=1e-2)


def test_exported_as_in_dynet():
    from autobatch import dynet_params
    assert sorted(dynet_params.__all__) == ["DynetParams", "init", "init_from_params"]
    for name in dynet_params.__all__:
        assert getattr(dy, name) is getattr(dynet_params, name)
