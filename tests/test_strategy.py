"""Choosing the batching strategy: renew_cg(autobatching=...), set_default_strategy,
the AUTOBATCH_STRATEGY variable and DyNet's --dynet-autobatch flag."""
import sys

import numpy as np
import pytest

import autobatch as dy
from autobatch import runtime
from autobatch.runtime import Strategy


def _tiny_loss():
    m = dy.Model()
    W = m.add_parameters((2, 2))
    return dy.esum([dy.sum_elems(dy.tanh(W * dy.inputVector([k, 1.0]))) for k in range(3)])


@pytest.mark.parametrize("value,want", [
    ("none", Strategy.NONE), ("depth", Strategy.DEPTH), ("agenda", Strategy.AGENDA),
    (" Agenda ", Strategy.AGENDA), ("DEPTH", Strategy.DEPTH),
    (Strategy.NONE, Strategy.NONE), (Strategy.DEPTH, Strategy.DEPTH), (Strategy.AGENDA, Strategy.AGENDA),
    (0, Strategy.NONE), (1, Strategy.AGENDA), (2, Strategy.DEPTH),      # DyNet's codes
    (np.int64(2), Strategy.DEPTH), ("0", Strategy.NONE), ("2", Strategy.DEPTH),
    (True, Strategy.AGENDA), (False, Strategy.NONE),
])
def test_renew_cg_accepts(value, want):
    g = dy.renew_cg(autobatching=value)
    assert g.strategy is want
    assert dy.cg() is g
    _tiny_loss().value()
    assert dy.stats()["strategy"] == want.value


def test_renew_cg_without_argument_uses_default():
    assert dy.default_strategy() is Strategy.AGENDA
    assert dy.renew_cg().strategy is Strategy.AGENDA
    dy.set_default_strategy("depth")
    assert dy.default_strategy() is Strategy.DEPTH
    assert dy.renew_cg().strategy is Strategy.DEPTH
    assert dy.renew_cg(autobatching="none").strategy is Strategy.NONE   # explicit wins
    assert dy.renew_cg().strategy is Strategy.DEPTH
    dy.set_default_strategy(0)
    assert dy.renew_cg().strategy is Strategy.NONE


def test_strategy_changes_batching_not_results():
    out = {}
    for s in ("none", "depth", "agenda"):
        dy.reset_random_seed(4)
        dy.renew_cg(autobatching=s)
        loss = _tiny_loss()
        out[s] = (loss.value(), dy.stats()["forward_batches"])
    assert out["none"][0] == pytest.approx(out["agenda"][0], rel=1e-6)
    assert out["none"][0] == pytest.approx(out["depth"][0], rel=1e-6)
    assert out["agenda"][1] < out["none"][1]


def test_dynet_codes_beyond_2_mean_agenda():
    """DyNet's --dynet-autobatch 3 (an agenda variant) and 100+ (time the strategies, keep
    the fastest) must not stop a DyNet program: they give agenda."""
    for code in (3, "3", 100, 102):
        assert runtime.parse_strategy(code) is Strategy.AGENDA


@pytest.mark.parametrize("bad", ["fast", "", "4", -1, 7, 99, 1.5, None.__class__, [1], "agenda!"])
def test_bad_values_raise_clear_error(bad):
    with pytest.raises(ValueError) as e:
        dy.renew_cg(autobatching=bad)
    msg = str(e.value)
    assert str(bad).strip() in msg
    assert "'none', 'depth', 'agenda'" in msg
    with pytest.raises(ValueError):
        dy.set_default_strategy(bad)
    assert dy.default_strategy() is Strategy.AGENDA       # unchanged by the failed call


def test_bad_value_leaves_current_graph_alive():
    g = dy.renew_cg()
    x = dy.inputVector([1.0, 2.0])
    with pytest.raises(ValueError):
        dy.renew_cg(autobatching="nope")
    assert dy.cg() is g and g.alive
    assert x.value() == [1.0, 2.0]


# --- process defaults: re-create the runtime state under a patched environment ---------------
def _fresh(monkeypatch, env=None, argv=()):
    monkeypatch.delenv("AUTOBATCH_STRATEGY", raising=False)
    if env is not None:
        monkeypatch.setenv("AUTOBATCH_STRATEGY", env)
    monkeypatch.setattr(sys, "argv", ["prog.py", *argv])
    return runtime._State()


def test_default_is_agenda(monkeypatch):
    assert _fresh(monkeypatch).strategy is Strategy.AGENDA


@pytest.mark.parametrize("env,want", [("none", Strategy.NONE), ("depth", Strategy.DEPTH),
                                      ("agenda", Strategy.AGENDA), ("0", Strategy.NONE),
                                      ("2", Strategy.DEPTH), ("", Strategy.AGENDA)])
def test_env_variable(monkeypatch, env, want):
    assert _fresh(monkeypatch, env=env).strategy is want


@pytest.mark.parametrize("argv,want", [
    (["--dynet-autobatch", "0"], Strategy.NONE),
    (["--dynet-autobatch", "1"], Strategy.AGENDA),
    (["--dynet-autobatch", "2"], Strategy.DEPTH),
    (["--dynet-mem", "512", "--dynet-autobatch=2"], Strategy.DEPTH),
    (["--dynet-autobatch"], Strategy.AGENDA),          # flag without a value: ignored
])
def test_argv_flag(monkeypatch, argv, want):
    assert _fresh(monkeypatch, argv=argv).strategy is want


def test_argv_flag_wins_over_env(monkeypatch):
    assert _fresh(monkeypatch, env="depth", argv=["--dynet-autobatch", "0"]).strategy is Strategy.NONE


def test_bad_env_or_flag_names_its_source(monkeypatch):
    with pytest.raises(ValueError, match="AUTOBATCH_STRATEGY=fastest"):
        _fresh(monkeypatch, env="fastest")
    with pytest.raises(ValueError, match="--dynet-autobatch 9"):
        _fresh(monkeypatch, argv=["--dynet-autobatch", "9"])


def test_state_default_used_by_graphs(monkeypatch):
    """A default set through the runtime state is what renew_cg() picks up."""
    monkeypatch.setattr(runtime.state(), "strategy", Strategy.DEPTH)
    assert dy.renew_cg().strategy is Strategy.DEPTH
